// The layer contract: the one shape of API every kformer layer has (docs/architecture.md).
//
//   Layer(const ExecutionSpace& exec, <sizes>, const LayerOptions& options = {}, name)
//       Parameters are allocated and initialised on exec's memory space.
//   void forward(const ExecutionSpace& exec, const RunContext& ctx, x, y [, extra inputs])
//       x, y: RowMajorView<Tensor2/3> (core/view_adapters.hpp), any View whose memory is
//       row-major, else a kformer::Error. y = layer(x). ctx says training or eval, the step
//       (dropout masks) and whether a backward follows (ctx.grad false lets a layer keep nothing
//       for it).
//   void backward(const ExecutionSpace& exec, const RunContext& ctx, x, dy, dx
//                 [, extra inputs], WriteMode dx_mode = WriteMode::Assign)
//       x: the last forward's input. Parameter gradients accumulate (+=), so that a caller can sum
//       micro-batches; dx is written (Assign) or added to (Add), or skipped when dx is empty.
//   template <class F> void visit_parameters(F&& f)   f(state_dict name, Param&), PyTorch's names
//   template <class F> void visit_buffers(F&& f)      f(name, View&): non-trainable state
//   void zero_grad(const ExecutionSpace& exec)
//   std::int64_t buffer_bytes() const                 bytes the layer holds besides parameters
//
// Every check runs on the host before a kernel is launched and raises kformer::Error naming the
// layer, the argument and the expected and actual shapes; a failed call changes nothing.
#pragma once

namespace kformer {

// How a backward writes its input gradient.
enum class WriteMode {
  Assign,  // dx = d layer / dx
  Add,     // dx += d layer / dx (a residual branch's gradient added to the other branch's)
};

}  // namespace kformer
