#!/usr/bin/env python3
"""Mutation test of the training paths: does the suite catch small, plausible bugs?

    scripts/mutation-test.py [--build DIR] [--only ID[,ID...]] [--list]

Applies each mutant below to a clean source tree, one at a time: replaces one exact piece of
code (which must occur exactly once), rebuilds the targets the mutant names in the build folder
(default build/, configured by scripts/build.sh), runs the tests it names, and restores the file
(also on Ctrl-C or a failure). A mutant is "caught" when a named test fails, "survived" when all
pass, "no build" when it does not compile (a bad mutant, not a finding). Prints a markdown table
and exits 1 if any mutant survived. Not run in CI: each mutant is a rebuild (about 1-2 minutes
on 2 cores), and it needs a clean tree (it refuses to run over uncommitted changes to the files
it mutates). The first five are the bugs of issue 24, which once passed the whole suite.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# id, what the bug is, file, exact code, its replacement, build targets, test commands (run from
# the repository root; {build} is the build folder).
MUTANTS = [
    ("fusion-read-order",
     "fusion planner reads a chain's inputs before its forwarded writes (clip read before the clamp)",
     "core/src/fusion.cpp",
     "    bool read(const xylem_tensor_arg& a, uint8_t mode, V& out) override {\n        const Region r(a);\n",
     "    bool read(const xylem_tensor_arg& a, uint8_t mode, V& out) override {\n        const Region r(a);\n"
     "        for (const Input& in : inputs_)\n"
     "            if (Region(in.arg).same(r) && in.mode == mode) return out = in.value, true;\n",
     ["test_core"], ["{build}/bin/test_core --gtest_filter=*FusionChains*:*Fusion.*"]),
    ("recurrent-dropout-counter",
     "stacked lstm/gru dropout counter never advances: the same mask every step",
     "layers/recurrent.cpp",
     "opt_.dropout, seed_ + 0x632BE59BD9B4E019ull * ++calls_);",
     "opt_.dropout, seed_ + 0x632BE59BD9B4E019ull * calls_);",
     ["test_layers"], ["{build}/bin/test_layers --gtest_filter=*RecurrentLayer*Dropout*"]),
    ("resume-loss-sum",
     "the running loss sum is not restored on resume",
     "train/checkpoint.cpp",
     'st.loss_sum = j.at("loss_sum").get<float>();',
     'st.loss_sum = 0 * j.at("loss_sum").get<float>();',
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=Resume.SigintThenResumeEqualsUninterruptedRun"]),
    ("dp-buffers-summed",
     "data parallel: batch-norm running statistics summed across ranks, not averaged",
     "train/data_parallel.cpp",
     "        for (int64_t i = 0; i < t.numel(); ++i) v[i] *= inv;\n",
     "        (void)inv;\n",
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=Distributed.BatchNorm*"]),
    ("text-chunks-shuffled",
     "text chunks shuffled, breaking the char-rnn streams",
     "train/include/xylem/train/run_data.h",
     "bool shuffled() const { return !is_text(); }",
     "bool shuffled() const { return true; }",
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=*TextTraining.BatchesFollowTheStreamsInOrder/native"]),
    # ---- further bugs on training paths ----
    ("dropout-layer-counter",
     "the dropout layer's mask counter never advances",
     "layers/elementwise.cpp",
     "p_, seed_ + 0x632BE59BD9B4E019ull * ++calls_);",
     "p_, seed_ + 0x632BE59BD9B4E019ull * calls_);",
     ["test_layers"], ["{build}/bin/test_layers --gtest_filter=*RecurrentLayer*Dropout*/native"]),
    ("fused-clip-norm-max",
     "fused clip_by_norm scales by max(1, ...) instead of min: clipping off with fusion on",
     "core/src/fusion.cpp",
     "const V coef = e.f(XYLEM_FUSED_MIN, e.constant(1.0f),",
     "const V coef = e.f(XYLEM_FUSED_MAX, e.constant(1.0f),",
     ["test_core"], ["{build}/bin/test_core --gtest_filter=*FusionChains*"]),
    ("fused-sgd-dampening",
     "fused SGD applies the dampening as (1 + dampening)",
     "core/src/fusion.cpp",
     "keep = e.f(XYLEM_FUSED_SUB, e.constant(1.0f), e.param(at.dampening));",
     "keep = e.f(XYLEM_FUSED_ADD, e.constant(1.0f), e.param(at.dampening));",
     ["test_core"], ["{build}/bin/test_core --gtest_filter=*FusionChains*"]),
    ("fused-nesterov-momentum",
     "fused Nesterov steps by the velocity alone (plain momentum)",
     "core/src/fusion.cpp",
     "const V step = nesterov ? e.f(XYLEM_FUSED_ADD, gi, e.f(XYLEM_FUSED_MUL, mom, vi)) : vi;",
     "const V step = vi;",
     ["test_core"], ["{build}/bin/test_core --gtest_filter=*FusionChains*"]),
    ("adam-bias-correction",
     "Adam's bias corrections one step late",
     "solvers/solver.cpp",
     "    ++steps_;\n    const double t = static_cast<double>(steps_);\n",
     "    ++steps_;\n    const double t = static_cast<double>(steps_ + 1);\n",
     ["test_solvers"], ["{build}/bin/test_solvers"]),
    ("best-checkpoint-worst",
     "the best checkpoint keeps the worst epoch",
     "train/fit.cpp",
     "(st_.has_best ? improves(st_.best_metric, value, st_.best_value) : std::isfinite(value));",
     "(st_.has_best ? !improves(st_.best_metric, value, st_.best_value) : std::isfinite(value));",
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=Resume.BestCheckpointIsTheBestByValidationLoss"]),
    ("early-stopping-never-counts",
     "early stopping never counts an epoch without improvement",
     "train/run_report.cpp",
     "            ++s.epochs_since_best;\n",
     "            s.epochs_since_best = 0;\n",
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=TrainingLoop.*"]),
    ("schedule-epoch-late",
     "the learning-rate schedule is one epoch late",
     "train/fit.cpp",
     "scheduled_lr(o_.base_lr, o_.schedule, epoch - 1,",
     "scheduled_lr(o_.base_lr, o_.schedule, epoch - 2,",
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=TrainingLoop.*"]),
    ("clip-value-one-sided",
     "clipping by value clamps to [0, clip] instead of [-clip, clip]",
     "solvers/solver.cpp",
     "ops::clamp(dev, p.grad, -clip_.value, clip_.value);",
     "ops::clamp(dev, p.grad, 0.0f, clip_.value);",
     ["test_solvers"], ["{build}/bin/test_solvers --gtest_filter=*Clip*"]),
    ("resume-shuffle-rng",
     "the shuffle generator is not restored on resume",
     "train/checkpoint.cpp",
     'st.shuffle_rng = j.at("shuffle_rng").get<std::string>();',
     '(void)j.at("shuffle_rng");',
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=Resume.TwoEpochsThenResumeEqualsThreeEpochs"]),
    ("validation-also-trained",
     "the held-out validation images stay in the training set",
     "train/run_data.cpp",
     "val(rows.begin(), rows.begin() + held), train(rows.begin() + held, rows.end());",
     "val(rows.begin(), rows.begin() + held), train(rows.begin(), rows.end());",
     ["xylem", "test_e2e"], ["{build}/bin/test_e2e --gtest_filter=TrainingLoop.ValidationIsHeldOutOfTheTrainingImagesBySeed"]),
    ("native-gemm-blocks-follow-threads",
     "native GEMM blocks follow the thread count: results change with XYLEM_NUM_THREADS",
     "plugins/native/native.h",
     "std::min<double>(std::min<int64_t>(units, machine_slices()), work / min_per_slice);",
     "std::min<double>(std::min<int64_t>(units, split_cpus()), work / min_per_slice);",
     ["xylem_native", "xylem-test-op-battery", "test_ops"],
     ["{build}/bin/test_ops --gtest_filter=NativeDeterminism.EveryThreadCountGivesTheSameBitsOnEachLevel"]),
    ("token-ids-gradient-not-zeroed",
     "lstm/gru reading token ids: W_ih's scattered gradient adds to the last step's",
     "layers/recurrent.cpp",
     "    ops::fill(dev, acc, 0.0f);\n    ops::scatter_add_rows(dev, rows, ws.ids, acc);",
     "    ops::scatter_add_rows(dev, rows, ws.ids, acc);",
     ["test_layers"], ["{build}/bin/test_layers --gtest_filter=*RecurrentLayer.TokenIds*"]),
    ("winograd4-output-transform",
     "Winograd F(4x4, 3x3): A^T's second row scaled wrong (2.001 for 2) in the output transform",
     "plugins/native/ops/conv_winograd_f4.cpp",
     "    y[1] = d + 2.0f * d2;",
     "    y[1] = d + 2.001f * d2;",
     ["xylem_native", "test_ops"],
     ["{build}/bin/test_ops --gtest_filter=NativeConvPaths.*"]),
    ("winograd4-flat-row-offset",
     "Winograd F(4x4, 3x3) on a flat run of tiles: the output rows read at a*tw, not a*we",
     "plugins/native/ops/conv_winograd_f4.cpp",
     "interleave4(s, a * p.tq, p.ow",
     "interleave4(s, a * p.tw, p.ow",
     ["xylem_native", "test_ops"],
     ["{build}/bin/test_ops --gtest_filter=NativeConvPaths.*"]),
    ("depthwise-flat-mask-edge",
     "the depthwise flat path keeps a column tap's lanes one column past the row's end",
     "plugins/native/ops/conv_depthwise.cpp",
     "j + dj >= 0 && j + dj < v.ow ? -1 : 0;",
     "j + dj >= 0 && j + dj <= v.ow ? -1 : 0;",
     ["xylem_native", "test_ops"],
     ["{build}/bin/test_ops --gtest_filter=NativeConvPaths.*"]),
    ("pointwise-stream-last-vector",
     "the pointwise direct path's streamed copy drops each row's last vector",
     "plugins/native/ops/conv.cpp",
     "for (int64_t j = 0; j < cols; j += S::L) S::stream",
     "for (int64_t j = 0; j + S::L < cols; j += S::L) S::stream",
     ["xylem_native", "test_ops"],
     ["{build}/bin/test_ops --gtest_filter=NativeConvPaths.*"]),
    ("output-read-inside-loses-its-gradient",
     "a model output that other layers also read gets only their gradients (its own dropped)",
     "layers/include/xylem/layers/net.h",
     "size_t grad_sources(size_t i) const { return nodes_[i].consumers + (nodes_[i].is_output ? 1 : 0); }",
     "size_t grad_sources(size_t i) const { return nodes_[i].consumers; }",
     ["test_layers"],
     ["{build}/bin/test_layers --gtest_filter=*SeveralInputs*"]),
    ("second-model-input-reads-the-first",
     "every layer reading a model input gets the first one",
     "layers/net.cpp",
     "for (size_t j : n.from) xs_.push_back(is_model_input(j) ? xs[j - kFirstModelInput] : outputs_[j]);",
     "for (size_t j : n.from) xs_.push_back(is_model_input(j) ? xs[0] : outputs_[j]);",
     ["test_onnx"],
     ["{build}/bin/test_onnx --gtest_filter=*SeveralInputs*:*Node*"]),
    ("conv-bias-inside-beta-ignored",
     "the bias gradient inside conv2d_bwd_filter overwrites a shared bias's gradient (beta ignored)",
     "plugins/native/ops/conv_filter_dot.cpp",
     "db[k] = beta == 0.0f ? static_cast<float>(sum) : static_cast<float>(beta * db[k] + sum);",
     "db[k] = static_cast<float>(sum);",
     ["xylem_native", "xylem-conformance"],
     ["{build}/bin/xylem-conformance --plugin {build}/plugins/libxylem_native.so --gtest_filter=*Conv2dBackwardFilter*"]),
]


def run(cmd, log):
    log.write(f"$ {cmd}\n")
    log.flush()
    return subprocess.run(cmd, shell=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m[0] in args.only.split(",")]
    if args.list:
        for m in chosen:
            print(f"{m[0]}: {m[1]} ({m[2]})")
        return 0
    dirty = subprocess.run(["git", "status", "--porcelain", "--"] + sorted({m[2] for m in chosen}), cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        print("uncommitted changes in files the mutants patch; commit or stash them first:\n" + dirty, file=sys.stderr)
        return 2
    build = args.build
    log_path = os.path.join(ROOT, build, "mutation-test.log")
    rows = []
    with open(log_path, "w") as log:
        for mid, what, path, old, new, targets, tests in chosen:
            full = os.path.join(ROOT, path)
            src = open(full).read()
            if src.count(old) != 1:
                rows.append((mid, what, path, f"stale: the code occurs {src.count(old)} times", 0))
                continue
            t0 = time.time()
            try:
                open(full, "w").write(src.replace(old, new))
                log.write(f"\n==== {mid}: {what}\n")
                if run(f"cmake --build {build} -j$(nproc) --target {' '.join(targets)}", log) != 0:
                    verdict = "no build"
                else:
                    failed = [t for t in tests if run(t.format(build=build), log) != 0]
                    verdict = "caught" if failed else "SURVIVED"
            finally:
                open(full, "w").write(src)
            rows.append((mid, what, path, verdict, time.time() - t0))
            print(f"{mid}: {verdict} ({time.time() - t0:.0f} s)", flush=True)
        # Put the unmutated binaries back.
        run(f"cmake --build {build} -j$(nproc)", log)
    print("\n| mutant | bug | file | result |\n|---|---|---|---|")
    for mid, what, path, verdict, _ in rows:
        print(f"| {mid} | {what} | {path} | {verdict} |")
    print(f"\n{sum(r[3] == 'caught' for r in rows)} of {len(rows)} caught; log: {log_path}")
    return 1 if any(r[3] != "caught" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
