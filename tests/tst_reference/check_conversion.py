#!/usr/bin/python3
"""TST experiment directories as the reference code writes them, converted with the README's
command and run by kformer, against the same models run in PyTorch.

For each case below this script writes, in a scratch directory, what gzerveas/mvts_transformer's
main.py leaves behind for a run, following that code's file conventions:

    EXPERIMENT/configuration.json          the run's options (src/options.py's names; json.dump)
    EXPERIMENT/normalization.pickle        Normalizer.__dict__: norm_type and pandas Series of the
                                           training data's mean and std (or min_val and max_val)
    EXPERIMENT/checkpoints/model_best.pth  utils.save_model: {"epoch", "state_dict", "optimizer"}
    DATA/train.ts, DATA/test.ts            the data (configuration.json's data_dir and pattern)

The model is TST's (tests/golden/make_tst_goldens.py rebuilds it from ts_transformer.py) with
random non-trivial weights. Then, exactly as the README says:

    /usr/bin/python3 tools/pth_to_safetensors.py EXPERIMENT OUT
    kformer predict --checkpoint OUT --data DATA/test.ts [--masks masks.csv] --output OUT.csv
    kformer evaluate --checkpoint OUT --data DATA/test.ts

and the outputs are compared with PyTorch's on the test data prepared as TST prepares them (the
stored normalization, padding to max_seq_len, TST's padding masks, masked values set to 0): logits
and the predicted class, regression outputs, imputed values in the data's units, and evaluate's
loss and accuracy. The cases cover relu and gelu, BatchNorm and LayerNorm, fixed and learnable
encodings, standardization and min-max normalization, missing values (which TST interpolates and
the converted checkpoint tells kformer to interpolate), classification (a test file that lists its
classes in another order than TST's sorted one), regression with 2 targets (TST reads several
targets from its CSV-style data classes, not from .ts, so those data go to kformer as CSV) and
imputation. Then the refusals: a checkpoint without configuration.json and without --heads, a
flag that contradicts configuration.json, a missing normalization.pickle, unknown class names.

Needs Debian's python3-torch, python3-numpy and python3-pandas; run from anywhere:

    /usr/bin/python3 tests/tst_reference/check_conversion.py build/apps/kformer

Exits 0 when every check passes, 1 otherwise (every failure printed).
"""
import argparse
import csv
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pandas as pd
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
from make_tst_goldens import build_model, calibrate_batch_norms, eval_forward, randomize, save_pth  # noqa: E402

warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
CONVERTER = os.path.join(ROOT, "tools", "pth_to_safetensors.py")
EPS = np.finfo(float).eps  # TST's Normalizer adds it to the scale
TOLERANCE = 2e-4  # float32 outputs of O(1): kformer and PyTorch differ by reassociation (~1e-6)

COMMON = dict(feat_dim=3, max_len=16, d_model=16, n_heads=4, num_layers=2, dim_feedforward=32, dropout=0.1,
              projection="linear", norm_first=False)
CASES = [
    dict(name="classification_gelu_batchnorm_fixed", task="classification", activation="gelu",
         normalization_layer="batchnorm", pos_encoding="fixed", normalization="standardization",
         classes=["walk", "run", "sit"],  # listed unsorted: TST's class order is sorted (run, sit, walk)
         missing=0.08),  # values blanked (NaN): TST interpolates them linearly along time
    dict(name="classification_relu_layernorm_learnable", task="classification", activation="relu",
         normalization_layer="layernorm", pos_encoding="learnable", normalization="minmax", classes=["b", "a"]),
    dict(name="regression2_relu_batchnorm_learnable", task="regression", activation="relu",
         normalization_layer="batchnorm", pos_encoding="learnable", normalization="standardization", targets=2),
    dict(name="imputation_gelu_layernorm_fixed", task="imputation", activation="gelu",
         normalization_layer="layernorm", pos_encoding="fixed", normalization="standardization"),
]
# What TST's src/options.py gives every run, besides the case's own options (configuration.json
# holds them all; the converter must pick out the ones it needs).
TST_DEFAULTS = dict(config_filepath=None, output_dir="experiments", name="", comment="", no_timestamp=False,
                    records_file="./records.xls", console=False, print_interval=1, gpu="0", n_proc=-1,
                    num_workers=0, seed=None, limit_size=None, test_only=None, labels=None, test_from=None,
                    test_ratio=0, val_ratio=0.2, val_pattern=None, test_pattern="test", norm_from=None,
                    subsample_factor=None, masking_ratio=0.15, mean_mask_length=3, mask_mode="separate",
                    mask_distribution="geometric", exclude_feats=None, mask_feats=[0, 1], start_hint=0.0,
                    end_hint=0.0, harden=False, epochs=400, val_interval=2, optimizer="Adam", lr=1e-3,
                    lr_step=[1000000], lr_factor=[0.1], batch_size=64, l2_reg=0, global_reg=False,
                    key_metric="loss", freeze=False, model="transformer", data_window_len=None,
                    load_model=None, resume=False, change_output=False, save_all=False)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")
    return condition


# --- data ------------------------------------------------------------------------------------------
def make_series(rng, n, case):
    """n series (lengths 9..16) of 3 features at scales far from standardized, with labels or
    targets that depend on them."""
    series, labels, targets = [], [], []
    for i in range(n):
        length = int(rng.integers(9, COMMON["max_len"] + 1))
        t = np.arange(length)
        k = i % 3
        x = np.stack([5.0 + 3.0 * np.sin(0.3 * (k + 1) * t + rng.normal()),
                      -2.0 + 0.5 * np.cos(0.2 * t) + 0.1 * rng.normal(size=length),
                      100.0 + 20.0 * rng.normal(size=length)], axis=1)
        x = np.round(x, 4)
        if case.get("missing"):
            x[rng.random(x.shape) < case["missing"]] = np.nan
        series.append(x)
        if case["task"] == "classification":
            labels.append(case["classes"][i % len(case["classes"])])
        targets.append([float(x[:, 0].mean()), float(x[:, 2].std())])
    return series, labels, targets


def write_ts(path, series, labels, case):
    missing = "true" if any(np.isnan(x).any() for x in series) else "false"
    header = ["@problemName kformerCheck", "@timeStamps false", f"@missing {missing}", "@univariate false",
              f"@dimensions {COMMON['feat_dim']}", "@equalLength false", f"@seriesLength {COMMON['max_len']}"]
    header.append("@classLabel true " + " ".join(case["classes"]) if labels else "@classLabel false")
    lines = header + ["@data"]
    for i, x in enumerate(series):
        dims = [",".join(repr(float(v)) for v in x[:, f]) for f in range(x.shape[1])]
        lines.append(":".join(dims + ([labels[i]] if labels else [])))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_csv(path, series, targets):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["series_id", "time", "f0", "f1", "f2", "y0", "y1"])
        for i, x in enumerate(series):
            for t in range(x.shape[0]):
                w.writerow([f"s{i}", t] + [repr(float(v)) for v in x[t]] + [repr(v) for v in targets[i]])


def interpolated(series):
    """TST's interpolate_missing on each series (its data classes do it when they read a file)."""
    return [pd.DataFrame(x).interpolate(method="linear", limit_direction="both").values for x in series]


def tst_normalizer(series, kind):
    """Normalizer.__dict__ after TST's normalize() on the training frame (every step a row)."""
    df = pd.DataFrame(np.concatenate(series), columns=[f"dim_{f}" for f in range(COMMON["feat_dim"])])
    norm = dict(norm_type=kind, mean=None, std=None, min_val=None, max_val=None)
    if kind == "standardization":
        norm.update(mean=df.mean(), std=df.std())
    else:
        norm.update(max_val=df.max(), min_val=df.min())
    return norm


def normalize(x, norm):
    if norm["norm_type"] == "standardization":
        return (x - norm["mean"].values) / (norm["std"].values + EPS)
    return (x - norm["min_val"].values) / (norm["max_val"].values - norm["min_val"].values + EPS)


def denormalize(x, norm):
    if norm["norm_type"] == "standardization":
        return x * (norm["std"].values + EPS) + norm["mean"].values
    return x * (norm["max_val"].values - norm["min_val"].values + EPS) + norm["min_val"].values


def batch(series, norm, seq):
    """TST's collate: normalized values padded with zeros to seq steps, and the padding mask."""
    x = np.zeros((len(series), seq, COMMON["feat_dim"]))
    keep = np.zeros((len(series), seq), dtype=bool)
    for i, s in enumerate(series):
        x[i, :len(s)] = normalize(s, norm)
        keep[i, :len(s)] = True
    return torch.tensor(x, dtype=torch.float32), torch.tensor(keep)


# --- running things ----------------------------------------------------------------------------------
def run(cmd, expect_ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def make_experiment(work, case, gen, rng):
    """The experiment directory and the data; returns (experiment, the PyTorch model, data files,
    the normalizer, test series, test labels/targets)."""
    name = case["name"]
    h = dict(COMMON, task=case["task"], activation=case["activation"], pos_encoding=case["pos_encoding"],
             normalization_layer=case["normalization_layer"],
             num_outputs=len(case.get("classes", [])) or case.get("targets", 0))
    model = build_model(h)
    randomize(model, gen)
    calibrate_batch_norms(model, gen, h)

    data_dir = os.path.join(work, f"{name}-data")
    os.makedirs(data_dir)
    train, train_labels, train_targets = make_series(rng, 40, case)
    test, test_labels, test_targets = make_series(rng, 12, case)
    if case["task"] == "regression":
        files = (os.path.join(data_dir, "train.csv"), os.path.join(data_dir, "test.csv"))
        write_csv(files[0], train, train_targets)
        write_csv(files[1], test, test_targets)
    else:
        files = (os.path.join(data_dir, "train.ts"), os.path.join(data_dir, "test.ts"))
        write_ts(files[0], train, train_labels, case)
        # The test file lists its classes in another order again, as files of one dataset may.
        write_ts(files[1], test, test_labels, dict(case, classes=list(reversed(case.get("classes", [])))))
    norm = tst_normalizer(interpolated(train), case["normalization"])

    experiment = os.path.join(work, name)
    os.makedirs(os.path.join(experiment, "checkpoints"))
    configuration = dict(TST_DEFAULTS, data_dir=data_dir, pattern="train", data_class="tsra", task=case["task"],
                         normalization=case["normalization"], max_seq_len=COMMON["max_len"],
                         d_model=COMMON["d_model"], dim_feedforward=COMMON["dim_feedforward"],
                         num_heads=COMMON["n_heads"], num_layers=COMMON["num_layers"], dropout=COMMON["dropout"],
                         pos_encoding=case["pos_encoding"], activation=case["activation"],
                         normalization_layer={"batchnorm": "BatchNorm", "layernorm": "LayerNorm"}[
                             case["normalization_layer"]],
                         experiment_name=name, output_dir=experiment,
                         save_dir=os.path.join(experiment, "checkpoints"))
    with open(os.path.join(experiment, "configuration.json"), "w") as f:
        json.dump(configuration, f, indent=4, sort_keys=True)
    with open(os.path.join(experiment, "normalization.pickle"), "wb") as f:
        pickle.dump(norm, f, pickle.HIGHEST_PROTOCOL)
    save_pth(model, os.path.join(experiment, "checkpoints", "model_best.pth"), "tst_checkpoint")  # with Adam state
    return experiment, model, files, norm, test, test_labels, test_targets


def check_case(work, kformer, case, gen, rng):
    name = case["name"]
    experiment, model, files, norm, test, test_labels, test_targets = make_experiment(work, case, gen, rng)
    out = os.path.join(work, f"{name}-kformer")
    r = run([sys.executable, CONVERTER, experiment, out])  # the README's command, no flags
    print(f"{name}: {r.stdout.strip()}")
    data = ["--data", files[1]]
    if case["task"] == "regression":
        data += ["--target-columns", "y0", "y1", "--time-column", "time"]
    predictions = os.path.join(work, f"{name}-predictions.csv")
    seq = COMMON["max_len"]
    x, keep = batch(interpolated(test), norm, seq)

    if case["task"] == "imputation":
        mask = (torch.rand(x.shape, generator=gen) > 0.2) | ~keep[:, :, None]  # 1 = keep
        masks_csv = os.path.join(work, f"{name}-masks.csv")
        with open(masks_csv, "w") as f:
            f.write("series,step,feature\n")
            for s, t, j in zip(*np.nonzero(~mask.numpy())):
                f.write(f"{s},{t},{j}\n")
        run([kformer, "predict", "--checkpoint", out, *data, "--masks", masks_csv, "--output", predictions])
        expected = denormalize(eval_forward(model, x * mask, keep).double().numpy(), norm)
        worst = 0.0
        for row in read_rows(predictions):
            s, t, j = int(row["series"]), int(row["step"]), int(row["feature"])
            scale = abs(expected[s, t, j]) + 1.0
            worst = max(worst, abs(float(row["prediction"]) - expected[s, t, j]) / scale)
            check(int(row["masked"]) == int(not mask[s, t, j]), f"{name}: masked flag of ({s}, {t}, {j})")
        check(worst < TOLERANCE, f"{name}: imputed values differ from PyTorch's by {worst:.3g} (relative)")
        print(f"{name}: predict matches PyTorch to {worst:.2g} (relative, in the data's units)")
        return

    run([kformer, "predict", "--checkpoint", out, *data, "--output", predictions])
    y = eval_forward(model, x, keep).double()
    rows = read_rows(predictions)
    check(len(rows) == len(test), f"{name}: {len(rows)} predictions for {len(test)} series")
    if case["task"] == "classification":
        classes = sorted(case["classes"])  # TST's order: pandas' sorted categories
        got = np.array([[float(row[f"logit_{c}"]) for c in classes] for row in rows])
        worst = float(np.abs(got - y.numpy()).max())
        predicted = [classes[int(i)] for i in y.argmax(dim=1)]
        check([row["predicted"] for row in rows] == predicted, f"{name}: predicted classes differ from PyTorch's")
        labels = torch.tensor([classes.index(c) for c in test_labels])
        loss = float(torch.nn.functional.cross_entropy(y, labels))
        accuracy = float((y.argmax(dim=1) == labels).double().mean())
        text = run([kformer, "evaluate", "--checkpoint", out, *data]).stdout
        check(f"loss {loss:.4f} accuracy {accuracy:.3f}" in text,
              f"{name}: evaluate printed {text.strip()!r}, PyTorch gives loss {loss:.4f} accuracy {accuracy:.3f}")
    else:
        got = np.array([[float(row["output_0"]), float(row["output_1"])] for row in rows])
        worst = float(np.abs(got - y.numpy()).max())
        mse = float(((y - torch.tensor(test_targets, dtype=torch.float64)) ** 2).mean())
        text = run([kformer, "evaluate", "--checkpoint", out, *data]).stdout
        check(f"MSE {mse:.4f}" in text, f"{name}: evaluate printed {text.strip()!r}, PyTorch gives MSE {mse:.4f}")
    check(worst < TOLERANCE, f"{name}: outputs differ from PyTorch's by {worst:.3g}")
    print(f"{name}: predict matches PyTorch to {worst:.2g}; evaluate: {text.strip().splitlines()[-1]}")
    if case["pos_encoding"] == "fixed":  # TST's stored table kept as a learnable encoding
        kept = out + "-keep-table"
        run([sys.executable, CONVERTER, experiment, kept, "--keep-table"])
        with open(os.path.join(kept, "config.json")) as f:
            check(json.load(f)["model"]["pos_encoding"] == "learnable", f"{name}: --keep-table is not learnable")
        run([kformer, "predict", "--checkpoint", kept, *data, "--output", predictions])
        classes = sorted(case["classes"])
        got = np.array([[float(row[f"logit_{c}"]) for c in classes] for row in read_rows(predictions)])
        kept_worst = float(np.abs(got - y.numpy()).max())
        check(kept_worst < TOLERANCE, f"{name}: with --keep-table, outputs differ from PyTorch's by {kept_worst:.3g}")


def check_refusals(work, kformer):
    """What the converter must refuse rather than guess, each before writing anything."""
    source = os.path.join(work, "classification_gelu_batchnorm_fixed")
    pth = os.path.join(source, "checkpoints", "model_best.pth")

    def refused(label, args, needle):
        out = os.path.join(work, f"refused-{label}")
        r = run([sys.executable, CONVERTER, *args, out], expect_ok=False)
        check(r.returncode == 2 and needle in r.stderr, f"refusal {label}: exit {r.returncode}, stderr {r.stderr!r}"
              f" (expected {needle!r})")
        check(not os.path.exists(os.path.join(out, "model.safetensors")), f"refusal {label}: wrote a checkpoint")

    lone = os.path.join(work, "lone")
    os.makedirs(lone)
    shutil.copy(pth, lone)
    lone_pth = os.path.join(lone, "model_best.pth")
    refused("no-configuration", [lone_pth], "pass --heads N and --activation gelu|relu")
    refused("no-normalization", [lone_pth, "--heads", "4", "--activation", "gelu", "--class-names", "run,sit,walk"],
            "pass --normalization FILE, or --no-normalization")
    refused("no-class-names", [lone_pth, "--heads", "4", "--activation", "gelu", "--no-normalization", "--task",
                               "classification"],
            "pass --class-names")
    refused("contradiction", [source, "--activation", "relu"], "--activation relu contradicts configuration.json's")
    refused("wrong-classes", [source, "--class-names", "walk,run,sit"], "contradicts TST's class order")
    # A --heads the weights cannot refute but configuration.json does.
    refused("heads", [source, "--heads", "8"], "--heads 8 contradicts configuration.json's num_heads 4")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kformer", help="the kformer program (build/apps/kformer)")
    parser.add_argument("--work", help="keep the experiments, checkpoints and outputs in this directory")
    args = parser.parse_args()
    kformer = os.path.abspath(args.kformer)
    torch.manual_seed(20260814)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(5151)
    rng = np.random.default_rng(7)
    work = args.work or tempfile.mkdtemp(prefix="kformer-tst-reference-")
    os.makedirs(work, exist_ok=True)
    try:
        for case in CASES:
            check_case(work, kformer, case, gen, rng)
        check_refusals(work, kformer)
    finally:
        if not args.work:
            shutil.rmtree(work)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"all checks passed: {len(CASES)} TST experiment directories converted with no flag and run by kformer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
