/* kformer's C API: a transformer surrogate that a simulation code creates, runs and trains on its
 * own arrays, from C, Fortran (bindings/fortran/kformer.f90) or anything that calls C.
 *
 * The model maps a window of states to a window of states of the same shape,
 *     y = f(x),   x, y: (batch, seq, dim) row-major arrays: dim varies fastest
 * (a Fortran array x(dim, seq, batch) is the same memory), as kformer's
 * StandardTransformerNetwork: Linear(dim -> d_model), an encoder stack, Linear(d_model -> dim).
 * Arrays are the caller's: they are read and written in place, never copied, and must live in
 * the memory of kformer's default Kokkos execution space (host memory in a host build, device
 * memory in a CUDA or HIP build, which refuse a host pointer). The model is created from
 * a JSON config (model, loss, optimizer, learning-rate schedule, like TorchFort's YAML) or from a
 * checkpoint it saved. It computes in double (model.precision "float64", the default; arrays of
 * double, kformer_forward and kformer_train_step) or in float ("float32"; arrays of float,
 * kformer_forward_f32 and kformer_train_step_f32); the other pair is refused by name.
 *
 * Every function returns KFORMER_OK or an error code; kformer_last_error() then says what went
 * wrong, naming the argument, what was expected and what was given. No exception crosses this
 * boundary, and on an error the caller's arrays are not written.
 *
 * Config (every key but model.state_dim optional, these are the defaults):
 *   {"model": {"type": "transformer", "state_dim": 4, "d_model": 32, "heads": 4,
 *              "layers": 2, "dim_feedforward": 64, "seed": 0, "precision": "float64"},
 *    "loss": {"type": "mse"},
 *    "optimizer": {"type": "adam", "learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999,
 *                  "eps": 1e-8, "weight_decay": 0},
 *    "lr_schedule": {"type": "constant"}}
 *   optimizer.type: adam, adamw or radam; lr_schedule: {"type": "step", "step_size": N,
 *   "gamma": g} multiplies the learning rate by g every N training steps.
 */
#ifndef KFORMER_C_H
#define KFORMER_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kformer_status {
  KFORMER_OK = 0,
  KFORMER_ERROR_ARGUMENT = 1,   /* a null pointer, a shape or a config value out of range */
  KFORMER_ERROR_HANDLE = 2,     /* a null, destroyed or unknown model handle */
  KFORMER_ERROR_FILE = 3,       /* a file that cannot be read, written or parsed */
  KFORMER_ERROR_NOT_FINITE = 4, /* a NaN or infinity in the input, or a loss that is not finite */
  KFORMER_ERROR_STATE = 5,      /* kformer_initialize was not called, or Kokkos is finalized */
  KFORMER_ERROR_INTERNAL = 6    /* anything else (out of memory, ...) */
} kformer_status;

typedef struct kformer_model kformer_model; /* opaque */

/* Starts Kokkos unless the caller already did (then kformer runs on the caller's Kokkos). */
int kformer_initialize(void);
/* Finalizes Kokkos if kformer_initialize started it; every model must be destroyed before. */
int kformer_finalize(void);
/* The message of this thread's last failed call ("" if none); valid until its next call. */
const char* kformer_last_error(void);
/* For language bindings whose own checks fail before a call reaches this API (the Fortran
 * module's shape checks): makes `message` this thread's kformer_last_error() and returns
 * `status`. */
int kformer_report_error(int status, const char* message);

/* A new model from a JSON config file, or from the JSON text itself. */
int kformer_model_create(const char* config_path, kformer_model** model);
int kformer_model_create_from_string(const char* config_json, kformer_model** model);
/* A model saved by kformer_model_save (weights, optimizer state, step and config), ready to
 * infer or to go on training. */
int kformer_model_load(const char* path, kformer_model** model);
/* Writes the model to `path` (a safetensors file, replaced in one rename). */
int kformer_model_save(const kformer_model* model, const char* path);
/* Frees the model; *model is set to NULL. A null *model is an error, as is a second destroy. */
int kformer_model_destroy(kformer_model** model);

int kformer_model_state_dim(const kformer_model* model, int64_t* dim);
int kformer_model_parameter_count(const kformer_model* model, int64_t* count);
int kformer_model_step_count(const kformer_model* model, int64_t* steps);

/* output = f(input).   input, output: (batch, seq, dim), dim = the model's state_dim. */
int kformer_forward(kformer_model* model, const double* input, int64_t batch, int64_t seq,
                    int64_t dim, double* output);
int kformer_forward_f32(kformer_model* model, const float* input, int64_t batch, int64_t seq,
                        int64_t dim, float* output);
/* One optimizer step on the mean squared error of f(input) against target (both (batch, seq,
 * dim)); *loss receives the loss before the step. A loss that is not finite takes no step. */
int kformer_train_step(kformer_model* model, const double* input, const double* target,
                       int64_t batch, int64_t seq, int64_t dim, double* loss);
int kformer_train_step_f32(kformer_model* model, const float* input, const float* target,
                           int64_t batch, int64_t seq, int64_t dim, double* loss);

#ifdef __cplusplus
}
#endif

#endif /* KFORMER_C_H */
