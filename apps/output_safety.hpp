// What the program refuses before it runs, so that no command line can destroy the user's files:
// an output that is one of the command's own inputs (the data, the masks, a file of the
// checkpoint it reads), a fine-tuning run written over its pretrained model, and a training run
// written over an earlier checkpoint without --resume (continue it) or --overwrite (replace it).
#pragma once

#include "cli.hpp"

namespace kformer::app {

// Throws kformer::Error naming the option, the path and what it would overwrite.
void check_outputs(Command command, const CliOptions& options);

}  // namespace kformer::app
