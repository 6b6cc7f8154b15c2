// The fused attention's passes for MultiHeadAttention's masks, compiled here once for every
// enabled space and for float and double (flash.hpp declares them extern elsewhere).
#define KFORMER_FLASH_INSTANTIATE
#include "impl/attention/flash.hpp"

namespace kformer::impl::flash {

KFORMER_FLASH_ALL_INSTANCES(template)

}  // namespace kformer::impl::flash
