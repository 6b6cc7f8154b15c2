/* A simulation that trains a kformer surrogate of its own time step online, through the C API.
 *
 * The simulation: B members of 1-D periodic advection-diffusion on D grid points, explicit Euler,
 *   u_i' = u_i + dt (-c (u_{i+1} - u_{i-1}) / (2h) + nu (u_{i+1} - 2 u_i + u_{i-1}) / h^2),
 * its state two arrays (before and after the step, (B, 1, D) row-major). Every TRAIN_EVERY steps
 * it hands both to kformer for one training step (state -> next state); every REPORT_EVERY steps
 * it asks the model for the next state and prints the loss and the surrogate's largest error. The
 * arrays are the simulation's own: kformer reads them in place. examples/online_training/
 * online_training.f90 is the same program in Fortran; their outputs agree (a CTest checks it).
 *
 *   online_training CHECKPOINT_PATH
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kformer_c.h>

enum { B = 4, D = 8, STEPS = 400, TRAIN_EVERY = 2, REPORT_EVERY = 100 };

static void check(int status, const char* what) {
  if (status != KFORMER_OK) {
    fprintf(stderr, "%s failed (%d): %s\n", what, status, kformer_last_error());
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: online_training CHECKPOINT_PATH\n");
    return 2;
  }
  const double pi = 3.14159265358979323846, c = 1.0, nu = 0.05, h = 1.0 / D, dt = 0.01;
  double u[B * D], next[B * D], predicted[B * D];
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < D; ++i)
      u[b * D + i] = sin(2 * pi * i * h + 0.5 * b) + 0.5 * cos(4 * pi * i * h);
  check(kformer_initialize(), "kformer_initialize");
  kformer_model* model = NULL;
  check(kformer_model_create_from_string(
            "{\"model\": {\"state_dim\": 8, \"d_model\": 16, \"heads\": 2, \"layers\": 1,"
            " \"dim_feedforward\": 32, \"seed\": 1},"
            " \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.003}}",
            &model),
        "kformer_model_create_from_string");
  double loss = 0;
  for (int n = 1; n <= STEPS; ++n) {
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < D; ++i) {
        const double left = u[b * D + (i + D - 1) % D], right = u[b * D + (i + 1) % D];
        const double here = u[b * D + i];
        next[b * D + i] =
            here + dt * (-c * (right - left) / (2 * h) + nu * (right - 2 * here + left) / (h * h));
      }
    if (n % TRAIN_EVERY == 0)
      check(kformer_train_step(model, u, next, B, 1, D, &loss), "kformer_train_step");
    if (n % REPORT_EVERY == 0) {
      check(kformer_forward(model, u, B, 1, D, predicted), "kformer_forward");
      double error = 0;
      for (int k = 0; k < B * D; ++k)
        error = fmax(error, fabs(predicted[k] - next[k]));
      printf("step %d loss %.9e max_error %.9e\n", n, loss, error);
    }
    memcpy(u, next, sizeof u);
  }
  /* Saved and loaded again: the same predictions, bit for bit. */
  check(kformer_model_save(model, argv[1]), "kformer_model_save");
  kformer_model* loaded = NULL;
  check(kformer_model_load(argv[1], &loaded), "kformer_model_load");
  double again[B * D];
  check(kformer_forward(model, u, B, 1, D, predicted), "kformer_forward");
  check(kformer_forward(loaded, u, B, 1, D, again), "kformer_forward");
  printf("reloaded model: %s\n",
         memcmp(predicted, again, sizeof again) == 0 ? "same outputs" : "DIFFERENT");
  check(kformer_model_destroy(&loaded), "kformer_model_destroy");
  check(kformer_model_destroy(&model), "kformer_model_destroy");
  check(kformer_finalize(), "kformer_finalize");
  return memcmp(predicted, again, sizeof again) == 0 ? 0 : 1;
}
