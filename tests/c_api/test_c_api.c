/* The C API, every function, from C: results against values worked out here (the loss a train
 * step reports is the MSE of the outputs forward gave just before; a step lowers it; save and
 * load give the same outputs and step count) and every error path (a null or destroyed handle,
 * null pointers, wrong shapes, NaN input, missing and foreign files, configs naming unknown
 * layers, optimizers, losses and keys, arrays of the other precision): a non-zero status, a
 * message naming the argument, and the caller's arrays left unwritten. A float32 model against
 * the double one of the same seed.
 *
 *   test_c_api SCRATCH_DIR
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kformer_c.h>

static int failures = 0;

#define CHECK(condition)                                                            \
  do {                                                                              \
    if (!(condition)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)

/* status is `expected` and the message holds `text`. */
static void expect_error(int status, int expected, const char* text, int line) {
  if (status != expected || strstr(kformer_last_error(), text) == NULL) {
    fprintf(stderr, "line %d: expected status %d with '%s', got %d: '%s'\n", line, expected, text,
            status, kformer_last_error());
    ++failures;
  }
}
#define EXPECT_ERROR(call, status, text) expect_error((call), (status), (text), __LINE__)

static const char* const kConfig =
    "{\"model\": {\"type\": \"transformer\", \"state_dim\": 3, \"d_model\": 8, \"heads\": 2,"
    " \"layers\": 1, \"dim_feedforward\": 16, \"seed\": 7}, \"loss\": {\"type\": \"mse\"},"
    " \"optimizer\": {\"type\": \"adamw\", \"learning_rate\": 0.01, \"weight_decay\": 0.01},"
    " \"lr_schedule\": {\"type\": \"step\", \"step_size\": 2, \"gamma\": 0.5}}";

enum { BATCH = 2, SEQ = 4, DIM = 3, N = BATCH * SEQ * DIM };

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_c_api SCRATCH_DIR\n");
    return 2;
  }
  char path[4096], config_path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", argv[1]);
  snprintf(config_path, sizeof config_path, "%s/config.json", argv[1]);
  kformer_model* model = NULL;

  /* Before kformer_initialize: a state error, not a crash. */
  EXPECT_ERROR(kformer_model_create_from_string(kConfig, &model), KFORMER_ERROR_STATE,
               "kformer_initialize");
  CHECK(kformer_initialize() == KFORMER_OK);
  CHECK(strcmp(kformer_last_error(), "") == 0);

  /* Configs. */
  EXPECT_ERROR(kformer_model_create_from_string(NULL, &model), KFORMER_ERROR_ARGUMENT,
               "config_json is NULL");
  EXPECT_ERROR(kformer_model_create_from_string(kConfig, NULL), KFORMER_ERROR_ARGUMENT,
               "model is NULL");
  EXPECT_ERROR(kformer_model_create_from_string(
                   "{\"model\": {\"type\": \"lstm\", \"state_dim\": 3}}", &model),
               KFORMER_ERROR_ARGUMENT, "unknown model type 'lstm'");
  EXPECT_ERROR(kformer_model_create_from_string(
                   "{\"model\": {\"state_dim\": 3}, \"optimizer\": {\"type\": \"sgd\"}}", &model),
               KFORMER_ERROR_ARGUMENT, "unknown optimizer 'sgd'");
  EXPECT_ERROR(kformer_model_create_from_string(
                   "{\"model\": {\"state_dim\": 3}, \"loss\": {\"type\": \"huber\"}}", &model),
               KFORMER_ERROR_ARGUMENT, "unknown loss 'huber'");
  EXPECT_ERROR(
      kformer_model_create_from_string("{\"model\": {\"state_dim\": 3, \"depth\": 2}}", &model),
      KFORMER_ERROR_ARGUMENT, "unknown key 'depth' in model");
  EXPECT_ERROR(kformer_model_create_from_string("{\"model\": {\"d_model\": 8}}", &model),
               KFORMER_ERROR_ARGUMENT, "model.state_dim is required");
  EXPECT_ERROR(
      kformer_model_create_from_string("{\"model\": {\"state_dim\": 3, \"heads\": 3}}", &model),
      KFORMER_ERROR_ARGUMENT, "model.d_model 32 is not a multiple of model.heads 3");
  EXPECT_ERROR(kformer_model_create_from_string("{\"model\": {\"state_dim\": 0}}", &model),
               KFORMER_ERROR_ARGUMENT, "state_dim must be from 1");
  EXPECT_ERROR(kformer_model_create_from_string("{\"model\": ", &model), KFORMER_ERROR_ARGUMENT,
               "not valid JSON");
  EXPECT_ERROR(kformer_model_create("/nonexistent/config.json", &model), KFORMER_ERROR_FILE,
               "cannot read /nonexistent/config.json");
  CHECK(model == NULL);

  FILE* f = fopen(config_path, "w");
  CHECK(f != NULL);
  fputs(kConfig, f);
  fclose(f);
  CHECK(kformer_model_create(config_path, &model) == KFORMER_OK);
  int64_t value = 0;
  CHECK(kformer_model_state_dim(model, &value) == KFORMER_OK && value == DIM);
  /* up (3*8+8) + attention (4*8*8+4*8) + feed-forward (8*16+16+16*8+8) + 2 norms (4*8) +
     down (8*3+3) */
  CHECK(kformer_model_parameter_count(model, &value) == KFORMER_OK &&
        value == 32 + 288 + 280 + 32 + 27);
  CHECK(kformer_model_step_count(model, &value) == KFORMER_OK && value == 0);
  EXPECT_ERROR(kformer_model_state_dim(model, NULL), KFORMER_ERROR_ARGUMENT, "dim is NULL");

  double input[N], target[N], output[N], before[N], again[N];
  for (int i = 0; i < N; ++i) {
    input[i] = sin(0.37 * i);
    target[i] = cos(0.21 * i);
  }
  CHECK(kformer_forward(model, input, BATCH, SEQ, DIM, output) == KFORMER_OK);
  /* One sequence alone gives its rows of the batch's outputs: the batch is independent. */
  CHECK(kformer_forward(model, input + SEQ * DIM, 1, SEQ, DIM, again) == KFORMER_OK);
  CHECK(memcmp(again, output + SEQ * DIM, sizeof(double) * SEQ * DIM) == 0);
  double mse = 0;
  for (int i = 0; i < N; ++i)
    mse += (output[i] - target[i]) * (output[i] - target[i]) / N;
  double loss = -1;
  CHECK(kformer_train_step(model, input, target, BATCH, SEQ, DIM, &loss) == KFORMER_OK);
  CHECK(fabs(loss - mse) <= 1e-12 * mse);
  for (int step = 0; step < 20; ++step)
    CHECK(kformer_train_step(model, input, target, BATCH, SEQ, DIM, &loss) == KFORMER_OK);
  CHECK(loss < mse);
  CHECK(kformer_model_step_count(model, &value) == KFORMER_OK && value == 21);
  /* In place: output over input. */
  CHECK(kformer_forward(model, input, BATCH, SEQ, DIM, before) == KFORMER_OK);
  memcpy(again, input, sizeof input);
  CHECK(kformer_forward(model, again, BATCH, SEQ, DIM, again) == KFORMER_OK);
  CHECK(memcmp(again, before, sizeof before) == 0);

  /* Shapes, pointers and values refused; the output is not written. */
  for (int i = 0; i < N; ++i)
    output[i] = 42.0;
  EXPECT_ERROR(kformer_forward(model, input, BATCH, SEQ, 4, output), KFORMER_ERROR_ARGUMENT,
               "dim must be the model's state_dim 3, got 4");
  EXPECT_ERROR(kformer_forward(model, input, 0, SEQ, DIM, output), KFORMER_ERROR_ARGUMENT,
               "batch and seq must be at least 1, got batch 0");
  EXPECT_ERROR(kformer_forward(model, NULL, BATCH, SEQ, DIM, output), KFORMER_ERROR_ARGUMENT,
               "input is NULL");
  EXPECT_ERROR(kformer_forward(model, input, BATCH, SEQ, DIM, NULL), KFORMER_ERROR_ARGUMENT,
               "output is NULL");
  input[7] = NAN;
  EXPECT_ERROR(kformer_forward(model, input, BATCH, SEQ, DIM, output), KFORMER_ERROR_NOT_FINITE,
               "input holds a NaN or infinity at element 7 (batch 0, step 2, component 1)");
  EXPECT_ERROR(kformer_train_step(model, input, target, BATCH, SEQ, DIM, &loss),
               KFORMER_ERROR_NOT_FINITE, "input holds a NaN");
  input[7] = sin(0.37 * 7);
  target[0] = INFINITY;
  EXPECT_ERROR(kformer_train_step(model, input, target, BATCH, SEQ, DIM, &loss),
               KFORMER_ERROR_NOT_FINITE, "target holds a NaN or infinity at element 0");
  target[0] = 1.0;
  EXPECT_ERROR(kformer_train_step(model, input, target, BATCH, SEQ, DIM, NULL),
               KFORMER_ERROR_ARGUMENT, "loss is NULL");
  int untouched = 1;
  for (int i = 0; i < N; ++i)
    untouched &= output[i] == 42.0;
  CHECK(untouched);
  CHECK(kformer_model_step_count(model, &value) == KFORMER_OK && value == 21);

  /* Save and load: the same outputs and step count; training goes on from the same state. */
  CHECK(kformer_model_save(model, path) == KFORMER_OK);
  kformer_model* loaded = NULL;
  CHECK(kformer_model_load(path, &loaded) == KFORMER_OK);
  CHECK(kformer_forward(loaded, input, BATCH, SEQ, DIM, again) == KFORMER_OK);
  CHECK(memcmp(again, before, sizeof before) == 0);
  CHECK(kformer_model_step_count(loaded, &value) == KFORMER_OK && value == 21);
  double loss_a = 0, loss_b = 0;
  CHECK(kformer_train_step(model, input, target, BATCH, SEQ, DIM, &loss_a) == KFORMER_OK);
  CHECK(kformer_train_step(loaded, input, target, BATCH, SEQ, DIM, &loss_b) == KFORMER_OK);
  CHECK(kformer_forward(model, input, BATCH, SEQ, DIM, before) == KFORMER_OK);
  CHECK(kformer_forward(loaded, input, BATCH, SEQ, DIM, again) == KFORMER_OK);
  CHECK(loss_a == loss_b && memcmp(again, before, sizeof before) == 0);
  EXPECT_ERROR(kformer_model_load("/nonexistent/model.safetensors", &loaded), KFORMER_ERROR_FILE,
               "/nonexistent/model.safetensors");
  EXPECT_ERROR(kformer_model_load(config_path, &loaded), KFORMER_ERROR_FILE, "config.json");
  EXPECT_ERROR(kformer_model_save(model, "/nonexistent/dir/model.safetensors"), KFORMER_ERROR_FILE,
               "/nonexistent/dir");
  EXPECT_ERROR(kformer_model_save(model, NULL), KFORMER_ERROR_ARGUMENT, "path is NULL");

  /* Precision float32: the same network from the same seed, in float. Its outputs agree with
     the double model's to float's rounding; it trains, saves and loads bit for bit; the double
     entry points are refused by name, as are the float ones on the double model. */
  static const char* const kFloatConfig =
      "{\"model\": {\"state_dim\": 3, \"d_model\": 8, \"heads\": 2, \"layers\": 1,"
      " \"dim_feedforward\": 16, \"seed\": 11, \"precision\": \"float32\"}}";
  static const char* const kDoubleConfig =
      "{\"model\": {\"state_dim\": 3, \"d_model\": 8, \"heads\": 2, \"layers\": 1,"
      " \"dim_feedforward\": 16, \"seed\": 11}}";
  EXPECT_ERROR(kformer_model_create_from_string(
                   "{\"model\": {\"state_dim\": 3, \"precision\": \"half\"}}", &loaded),
               KFORMER_ERROR_ARGUMENT, "model.precision must be \"float64\" or \"float32\"");
  kformer_model* single = NULL;
  kformer_model* twin = NULL;
  CHECK(kformer_model_create_from_string(kFloatConfig, &single) == KFORMER_OK);
  CHECK(kformer_model_create_from_string(kDoubleConfig, &twin) == KFORMER_OK);
  float input_f[N], target_f[N], output_f[N], again_f[N];
  for (int i = 0; i < N; ++i) {
    input_f[i] = (float)input[i];
    target_f[i] = (float)target[i];
  }
  CHECK(kformer_forward_f32(single, input_f, BATCH, SEQ, DIM, output_f) == KFORMER_OK);
  CHECK(kformer_forward(twin, input, BATCH, SEQ, DIM, output) == KFORMER_OK);
  double worst = 0;
  for (int i = 0; i < N; ++i)
    worst = fmax(worst, fabs((double)output_f[i] - output[i]) / (1 + fabs(output[i])));
  CHECK(worst > 0 && worst < 1e-5);
  EXPECT_ERROR(kformer_forward(single, input, BATCH, SEQ, DIM, output), KFORMER_ERROR_ARGUMENT,
               "the model computes in float32 (model.precision) but the arrays given are "
               "float64: call kformer_forward_f32 instead");
  EXPECT_ERROR(kformer_train_step_f32(twin, input_f, target_f, BATCH, SEQ, DIM, &loss),
               KFORMER_ERROR_ARGUMENT, "call kformer_train_step instead");
  input_f[5] = NAN;
  EXPECT_ERROR(kformer_forward_f32(single, input_f, BATCH, SEQ, DIM, output_f),
               KFORMER_ERROR_NOT_FINITE, "input holds a NaN or infinity at element 5");
  input_f[5] = (float)input[5];
  double first_f = 0, last_f = 0;
  CHECK(kformer_train_step_f32(single, input_f, target_f, BATCH, SEQ, DIM, &first_f) == KFORMER_OK);
  for (int s = 0; s < 20; ++s)
    CHECK(kformer_train_step_f32(single, input_f, target_f, BATCH, SEQ, DIM, &last_f) ==
          KFORMER_OK);
  CHECK(last_f < first_f);
  CHECK(kformer_model_save(single, path) == KFORMER_OK);
  CHECK(kformer_model_destroy(&loaded) == KFORMER_OK);
  CHECK(kformer_model_load(path, &loaded) == KFORMER_OK);
  CHECK(kformer_forward_f32(single, input_f, BATCH, SEQ, DIM, output_f) == KFORMER_OK);
  CHECK(kformer_forward_f32(loaded, input_f, BATCH, SEQ, DIM, again_f) == KFORMER_OK);
  CHECK(memcmp(again_f, output_f, sizeof output_f) == 0);
  CHECK(kformer_train_step_f32(single, input_f, target_f, BATCH, SEQ, DIM, &loss_a) == KFORMER_OK);
  CHECK(kformer_train_step_f32(loaded, input_f, target_f, BATCH, SEQ, DIM, &loss_b) == KFORMER_OK);
  CHECK(loss_a == loss_b);
  CHECK(kformer_model_destroy(&loaded) == KFORMER_OK);
  CHECK(kformer_model_destroy(&single) == KFORMER_OK);
  CHECK(kformer_model_destroy(&twin) == KFORMER_OK);
  CHECK(kformer_model_load(path, &loaded) == KFORMER_OK); /* a handle to destroy below */

  /* A binding's own check, reported through the API; the next successful call clears it. */
  CHECK(kformer_report_error(KFORMER_ERROR_ARGUMENT, "binding: x has shape (2)") ==
        KFORMER_ERROR_ARGUMENT);
  CHECK(strcmp(kformer_last_error(), "binding: x has shape (2)") == 0);
  CHECK(kformer_report_error(KFORMER_ERROR_STATE, NULL) == KFORMER_ERROR_STATE);
  CHECK(strcmp(kformer_last_error(), "an error without a message") == 0);
  CHECK(kformer_model_state_dim(model, &value) == KFORMER_OK);
  CHECK(strcmp(kformer_last_error(), "") == 0);

  /* Handles: null, destroyed. */
  EXPECT_ERROR(kformer_forward(NULL, input, BATCH, SEQ, DIM, output), KFORMER_ERROR_HANDLE,
               "model is NULL");
  kformer_model* destroyed = loaded;
  CHECK(kformer_model_destroy(&loaded) == KFORMER_OK);
  CHECK(loaded == NULL);
  EXPECT_ERROR(kformer_model_destroy(&loaded), KFORMER_ERROR_HANDLE, "model is NULL");
  EXPECT_ERROR(kformer_forward(destroyed, input, BATCH, SEQ, DIM, output), KFORMER_ERROR_HANDLE,
               "not a live kformer model");
  EXPECT_ERROR(kformer_model_destroy(&destroyed), KFORMER_ERROR_HANDLE, "not a live kformer model");
  EXPECT_ERROR(kformer_finalize(), KFORMER_ERROR_STATE, "1 model(s) not destroyed");
  CHECK(kformer_model_destroy(&model) == KFORMER_OK);
  CHECK(kformer_finalize() == KFORMER_OK);
  if (failures == 0) printf("test_c_api: every check passed\n");
  return failures == 0 ? 0 : 1;
}
