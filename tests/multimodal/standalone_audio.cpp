// audio.hpp compiles on its own (self-contained header).
#include <gemma4/multimodal/audio.hpp>
