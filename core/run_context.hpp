// What a forward pass needs to know besides its inputs.
#pragma once

#include <cstdint>

namespace kformer {

struct RunContext {
  bool training = false;   // dropout active, batch norm uses and updates batch statistics
  std::uint64_t step = 0;  // the training step: selects the dropout masks, so that a resumed run
                           // draws the same masks as an uninterrupted one
  bool grad = true;  // a backward may follow; false (inference only, like torch.no_grad()) lets
                     // layers skip what only the backward reads
};

}  // namespace kformer
