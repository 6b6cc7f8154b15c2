// What a forward pass needs to know besides its inputs.
#pragma once

#include <cstdint>

namespace kformer {

struct RunContext {
  bool training = false;   // dropout active, batch norm uses and updates batch statistics
  std::uint64_t step = 0;  // the training step: selects the dropout masks, so that a resumed run
                           // draws the same masks as an uninterrupted one
};

}  // namespace kformer
