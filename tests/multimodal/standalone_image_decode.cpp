// image_decode.hpp compiles on its own (self-contained header).
#include <gemma4/multimodal/image_decode.hpp>
