// image_resize.hpp compiles on its own (self-contained header).
#include <gemma4/multimodal/image_resize.hpp>
