"""Compare the C engine's logits with the NumPy reference (llama_ref.py).

Usage:
    /usr/bin/python3 tests/ref/compare_logits.py --tierllm build/tierllm \\
        --model M.gguf --tokens 1,2,3 --tol 1e-4

Runs the reference in-process (float64), then runs the engine as
    TIERLLM logits -m MODEL --tokens 1,2,3 -o OUT.f32
which must write float32 little-endian [n_tokens, n_vocab], raw.

Error metric, per position (row) r:
    rel[r] = max_j |engine[r,j] - ref[r,j]| / max_j |ref[r,j]|
and the reported value is max over rows.  Any non-finite engine value, a
wrong output size, a missing binary or a non-zero engine exit is a FAIL.

Prints one line  "model M: max rel err X (tol T) OK"  (or FAIL) and exits
0 on OK, 1 on FAIL.

Models with rounding matmuls (weights of type Q8_0, Q4_0, Q4_1, Q5_0, Q5_1:
32-blocks; Q2_K..Q6_K: 256-blocks, Q8_K-style; the engine rounds their
activations, see llama_ref.py): the reference emulates the rounding, but
rounding is discontinuous at ties, and float-level differences between any two
correct implementations flip a few q by one; on these tiny models one flip
moves the logits by up to ~2e-2 (the reference itself, run in float32 and in
float64, differs by 1.7e-2 on the synthetic Q4_0 model, and by 8e-7 without
rounding; with the 256-block scheme by up to 2.1e-2 on a synthetic embd-256
model, 70 tokens). So for models whose layers round, the emulated check uses
max(--tol, --round-tol) (default 5e-2; the line says so); for any model with a
rounding matmul (layers or classifier), the engine is also compared
with the exact-activation reference, printed as "activation rounding effect:
max rel err X", which must stay below --act-tol (default 5e-2; rounding moves
each activation by at most 1/254 of its block's amax, measured 1e-2..2e-2 on
logits for 32-blocks, 2.1e-2..2.6e-2 for 256-blocks). Both only catch a broken
scheme; kernel precision under the contract is checked exactly by
tests/test_kernels.c.

A file whose layer matrices do not round (F32/F16/BF16 layers, or the flash layout,
whose column products use activations as given) but whose classifier does (e.g. a
tied Q8_0 token_embd) is judged at --tol itself: the classifier's rounding is the last
step, so a tie flip there moves the logits by one known vector (d times a column of
the classifier). The reference lists the classifier inputs within reach of a tie
(llama_ref.LlamaRef.classifier_tie_flips: those an engine state within --tol of its
own could round the other way) and, per row, the engine is compared with the
reference under the resolution of those ties that it is closest to
(llama_ref.resolve_ties; the relative error is then taken against that row); the
line says how many were resolved the other way.

A flash file with neuron bundles and a predictor (llama_ref.py: blk.N.ffn_neurons,
ffn_pred_*): the reference computes, as the engine, only the predicted neurons, the union
over the rows of each prompt block; the block is the engine's prompt batch, taken from
--engine-arg -b N / --batch-size N (two --engine-arg each), default 64 (the engine's
default), or --neuron-block N. A neuron is predicted iff its score s > 0, and the engine
computes s in float32: a score within float noise of 0 can be decided the other way, which
adds or drops that neuron's whole contribution. The line "predictor: N of M scores within
1e-3 of 0, K decide ..." counts them (K: those whose choice, the largest score of its
block, is that close); with K = 0 no neuron choice can differ, and the tolerances above
hold as they are.

--ref-only-dump: skip the engine; only run the reference and write its
float32 logits to --ref-out (default: ./<model name>.ref.f32).
--self-test: check the comparison logic itself on synthetic arrays, and run the
reference's self-test (llama_ref.py --self-test without a model: the two
activation-rounding schemes on hand-computed blocks; RoPE pairings, frequency
factors and the sliding-window mask on hand-computed values; biases, NeoX and the
window end to end on a synthetic model).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rel_errors(engine, ref):
    """Per-row relative error max|a-b| / max|b|; inf for non-finite rows."""
    engine = np.asarray(engine, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert engine.shape == ref.shape
    num = np.abs(engine - ref).max(axis=1)
    den = np.abs(ref).max(axis=1)
    den = np.where(den > 0, den, 1.0)   # all-zero reference row: absolute error
    rel = num / den
    bad = ~np.all(np.isfinite(engine), axis=1) | ~np.isfinite(rel)
    return np.where(bad, np.inf, rel)


def judge(engine, ref, tol):
    """(ok, max_rel, worst_row). NaN/inf anywhere fails: comparisons with NaN
    are False, so the non-finite case is turned into +inf explicitly."""
    rel = rel_errors(engine, ref)
    worst = int(np.argmax(rel))
    max_rel = float(rel[worst])
    return (max_rel <= tol), max_rel, worst


ENGINE_DEFAULT_BATCH = 64   # the engine's prompt rows per step (exec/context.c), -b
NEAR_ZERO = 1e-3            # predictor scores this close to 0 are reported


def engine_batch(engine_args, default=ENGINE_DEFAULT_BATCH):
    """The engine's prompt batch (-b N / --batch-size N, the last one given) from the
    extra engine arguments, else the default."""
    b = default
    for i, a in enumerate(engine_args):
        if a in ("-b", "--batch-size") and i + 1 < len(engine_args):
            b = int(engine_args[i + 1])
        elif a.startswith("--batch-size="):
            b = int(a.split("=", 1)[1])
    return b


def run_engine(tierllm, model, tokens, n_vocab, timeout, extra=()):
    """Run the engine; return (logits array, None) or (None, error message)."""
    if not os.path.isfile(tierllm) or not os.access(tierllm, os.X_OK):
        return None, "engine binary not found or not executable: %s" % tierllm
    with tempfile.TemporaryDirectory(prefix="tierllm_cmp_") as tmp:
        out = os.path.join(tmp, "engine_logits.f32")
        cmd = [tierllm, "logits", "-m", model,
               "--tokens", ",".join(str(t) for t in tokens), "-o", out] + list(extra)
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "engine timed out after %ss: %s" % (timeout, " ".join(cmd))
        except OSError as e:
            return None, "cannot run engine: %s" % e
        if p.returncode != 0:
            tail = p.stdout.decode("utf-8", "replace")[-2000:].rstrip()
            if tail:
                print("engine output (tail):\n" + tail)
            return None, "engine exited with status %d: %s" % (p.returncode, " ".join(cmd))
        if not os.path.isfile(out):
            return None, "engine wrote no output file %s" % out
        size = os.path.getsize(out)
        want = len(tokens) * n_vocab * 4
        if size != want:
            return None, ("engine output is %d bytes, expected %d (= %d tokens x %d vocab x 4)"
                          % (size, want, len(tokens), n_vocab))
        return np.fromfile(out, dtype="<f4").reshape(len(tokens), n_vocab), None


def self_test():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 512)) * 5
    eng = ref.astype(np.float32)
    ok, e, _ = judge(eng, ref, 1e-4)
    assert ok and e < 1e-6, e                       # f32 rounding only: passes
    pert = eng.copy()
    pert[2, 100] += 0.01 * np.abs(ref[2]).max()     # 1% error in one logit, row 2
    ok, e, row = judge(pert, ref, 1e-4)
    assert not ok and row == 2 and abs(e - 0.01) < 1e-4, (ok, e, row)
    pert = eng.copy()
    pert[1, 7] = np.nan                             # NaN must fail
    ok, e, row = judge(pert, ref, 1e-4)
    assert not ok and row == 1 and e == np.inf, (ok, e, row)
    pert = eng.copy()
    pert[3, 0] = np.inf                             # inf must fail
    assert not judge(pert, ref, 1e-4)[0]
    ok, e, _ = judge(eng * 1.001, ref, 1e-4)        # 0.1% scale error fails
    assert not ok and 5e-4 < e < 2e-3, e
    ok, _, _ = judge(eng, ref, 1e-9)                # tolerance is honoured
    assert not ok
    z = np.zeros((1, 8))                            # all-zero reference row
    assert judge(z.astype(np.float32), z, 1e-4)[0]
    assert not judge(z + 1e-3, z, 1e-4)[0]
    assert engine_batch([]) == 64 and engine_batch(["-t", "2", "-b", "5"]) == 5
    assert engine_batch(["--batch-size", "7", "--reference"]) == 7
    assert engine_batch(["--batch-size=9"]) == 9 and engine_batch(["-b"]) == 64
    from llama_ref import self_test as ref_self_test
    ref_self_test()     # rounding, RoPE pairings and factors, window, biases, qwen2
    print("compare_logits self-test OK")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierllm", help="path to the tierllm binary")
    ap.add_argument("--model", help="GGUF model")
    ap.add_argument("--tokens", help="comma-separated token ids, e.g. 1,403,407")
    ap.add_argument("--tol", type=float, default=1e-4, help="max relative error (default 1e-4)")
    ap.add_argument("--round-tol", type=float, default=5e-2,
                    help="tolerance of the emulated check for models with rounding matmuls "
                         "(tie flips, see above; default 5e-2)")
    ap.add_argument("--act-tol", type=float, default=5e-2,
                    help="max relative error against the exact-activation reference, "
                         "for models with rounding matmuls (default 5e-2)")
    ap.add_argument("--timeout", type=float, default=600, help="engine timeout, seconds")
    ap.add_argument("--ref-only-dump", action="store_true",
                    help="run only the reference and write its logits to --ref-out")
    ap.add_argument("--ref-out", help="also write the reference logits (float32) here")
    ap.add_argument("--engine-arg", action="append", default=[],
                    help="extra argument for the engine (repeatable), e.g. --engine-arg=-b5")
    ap.add_argument("--no-act-check", action="store_true",
                    help="skip the comparison with exact activations (says so)")
    ap.add_argument("--sparsity", type=float, default=0.0,
                    help="activation sparsity of a converted file, in both (default 0)")
    ap.add_argument("--neuron-block", type=int, metavar="N",
                    help="neuron bundles: the reference's union of predicted neurons is over "
                         "blocks of N rows (default: the engine's -b from --engine-arg, else %d)"
                         % ENGINE_DEFAULT_BATCH)
    ap.add_argument("--self-test", action="store_true", help="test the comparison logic")
    args = ap.parse_args(argv)

    if args.self_test:
        return self_test()
    if not args.model or not args.tokens:
        ap.error("--model and --tokens are required")
    if not args.ref_only_dump and not args.tierllm:
        ap.error("--tierllm is required (or use --ref-only-dump)")
    name = os.path.basename(args.model)

    def fail(msg):
        print("model %s: FAIL: %s" % (name, msg))
        return 1

    try:
        from llama_ref import LlamaRef, parse_tokens, resolve_ties
        tokens = parse_tokens(args.tokens)
        block = args.neuron_block or engine_batch(args.engine_arg)
        # the engine's --no-predictor computes every neuron: so does the reference
        no_pred = "--no-predictor" in args.engine_arg
        ref_model = LlamaRef(args.model, sparsity=args.sparsity, neuron_block=block,
                             predictor=False if no_pred else None)
        ref = ref_model.forward(tokens)
        near = ref_model.near_zero_scores(NEAR_ZERO) if ref_model.predictor else None
    except Exception as e:  # noqa: BLE001 - any reference failure is a test failure
        return fail("reference: %s: %s" % (type(e).__name__, e))
    if not np.all(np.isfinite(ref)):
        return fail("reference produced non-finite logits")
    n_vocab = ref.shape[1]
    if near is not None:
        print("model %s: predictor: %d of %d scores within %g of 0, %d decide a neuron's "
              "choice (union over blocks of %d rows)"
              % (name, near[0], near[2], NEAR_ZERO, near[1], block))

    if args.ref_only_dump or args.ref_out:
        path = args.ref_out or (os.path.splitext(name)[0] + ".ref.f32")
        ref.astype("<f4").tofile(path)
        print("model %s: reference logits [%d, %d] float32 -> %s"
              % (name, len(tokens), n_vocab, path))
        if args.ref_only_dump:
            return 0

    engine_args = args.engine_arg + ["--sparsity", repr(args.sparsity)]
    engine, err = run_engine(args.tierllm, args.model, tokens, n_vocab, args.timeout,
                             engine_args)
    if err:
        return fail(err)

    tol, why, judged = args.tol, "", ref
    if ref_model.rounds_layers and args.round_tol > tol:
        tol, why = args.round_tol, ", activation rounding: tie flips"
    elif ref_model.rounds_any:      # only the classifier rounds: its near ties, resolved
        flips = ref_model.classifier_tie_flips(tokens, args.tol)
        judged, taken = resolve_ties(engine, ref, flips)
        why = (", classifier rounding: %d near ties in %d rows, %d resolved the other way"
               % (sum(len(F) for F in flips), sum(len(F) > 0 for F in flips), taken.sum()))
    ok, max_rel, worst = judge(engine, judged, tol)
    agree = int(np.sum(np.argmax(engine, axis=1) == np.argmax(ref, axis=1)))
    print("model %s: worst row %d of %d; argmax agrees on %d/%d rows"
          % (name, worst, len(tokens), agree, len(tokens)))
    act_ok = True
    if ref_model.rounds_any and args.no_act_check:
        print("model %s: comparison with exact activations not made (--no-act-check)" % name)
    elif ref_model.rounds_any:
        ref_model.exact_activations = True
        exact = ref_model.forward(tokens)
        act_ok, act_rel, _ = judge(engine, exact, args.act_tol)
        agree = int(np.sum(np.argmax(engine, axis=1) == np.argmax(exact, axis=1)))
        print("model %s: activation rounding effect: max rel err %.3g (bound %g), "
              "argmax agrees on %d/%d rows %s"
              % (name, act_rel, args.act_tol, agree, len(tokens), "OK" if act_ok else "FAIL"))
    if near is not None and near[1] and not ok:
        print("model %s: note: %d neuron choices rest on a predictor score within %g of 0; "
              "one decided the other way by the engine can explain the difference"
              % (name, near[1], NEAR_ZERO))
    print("model %s: max rel err %.3g (tol %g%s) %s"
          % (name, max_rel, tol, why, "OK" if ok and act_ok else "FAIL"))
    return 0 if ok and act_ok else 1


if __name__ == "__main__":
    sys.exit(main())
