#!/usr/bin/env python3
"""Where the gemv_stream designs' time goes (run 11): on the GPU, beside the designs themselves,
  - the floor of this harness: hbm_read (microbench/cuda-h200/hbm_read.cu) over exactly the chain's
    weight bytes, and one empty launch (launch.cu), timed as designs are (L2 flush, CUDA events);
  - cut-down copies of the designs (NOT designs: outputs wrong, so never --check): `noloop` streams no
    weights (launch + prologue + epilogue alone), `nobar` (O) drops the grid barrier, `nohead` (QKV)
    never runs a head epilogue (EPI 0) or does not wait for the head's other blocks (EPI 1);
  - ncu (gpu__time_duration, DRAM throughput) on the designs, when ncu is installed.
  diag_stream.py --cudac BIN --root DIR --out FILE.json [--ao P=V,...] [--qkv P=V,...] [--repeat N]
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_chains as bc

AO = "batch=1,hidden=3840,q_heads=16,head_dim=256"
QKV = "batch=1,hidden=3840,kv_heads=8,q_heads=16,head_dim=256"
CUTS = {  # name -> (template, [(old, new)]) applied to the instantiated source
    "noloop": [("ntiles = (nrows + SROWS - 1) / SROWS", "ntiles = 0")],
    "nobar": [("    grid_arrive_wait(bar);\n", "\n")],
    "nohead": [("s_done[h - h0] = atomicAdd(head_count + h, unsigned(hi - lo)) + unsigned(hi - lo) == unsigned(D);", "s_done[h - h0] = 0;"),
               ("} while (now < target);", "} while (false);"),  # EPI 0: no head epilogue; EPI 1: no wait for the head's blocks
               ("if (warp == 0) publish();", "{}"),  # QKF 1: no mid-stream publish, no head epilogue
               ("named_sync(THREADS);\n                publish();", "named_sync(THREADS);")],  # QKF 2: the same
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudac", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--ao", default="")
    ap.add_argument("--qkv", default="")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="diag-cache.")
    env = dict(os.environ, CUDAC_CACHE_DIR=cache)
    rows = []

    def run(name, path, kernel, shape, check=False, extra=()):
        argv = [a.cudac, "run", path, "--kernel", kernel, "--seed", "12", "--repeat", str(a.repeat), "--shape", shape, *extra]
        if check:
            argv.append("--check")
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
            text, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired:
            text, rc = "timeout", 124
        lines = bc.lines_of(text)
        cyc = [l["cycles"] for l in lines if l.get("type") == "run"]
        row = {"name": name, "kernel": kernel, "shape": shape, "rc": rc, "cycles_ns": cyc,
               "median_ns": statistics.median(cyc) if cyc else None, "min_ns": min(cyc) if cyc else None}
        ver = next((l for l in lines if l.get("type") == "verify"), None)
        if ver:
            row["verify"] = ver
        if not cyc:
            row["error"] = text[-800:]
        rows.append(row)
        print("%-40s %s" % (name, ("%8.1f us (min %8.1f)" % (row["median_ns"] / 1e3, row["min_ns"] / 1e3)) if cyc else "FAILED " + text[-300:]), flush=True)

    def inst(template, spec, cut=None):
        ov = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
        _, path, _ = bc.instantiate(os.path.join(a.root, "dsl_templates/cuda-h200", template + ".template.yaml"), ov)
        if cut:
            src = open(path).read()
            for old, new in CUTS[cut]:
                assert old in src, (template, cut, old)
                src = src.replace(old, new)
            open(path, "w").write(src)
        return path

    mb = os.path.join(a.root, "microbench/cuda-h200")
    probes = []
    for nbytes in (31457280, 62914560):
        for warps in (16, 32, 64):
            p, _, _ = bc.instantiate_probe(os.path.join(mb, "hbm_read.cu"), {"bytes": nbytes, "warps": warps})
            probes.append(("hbm_read %d MB, %d warps/SM" % (nbytes >> 20, warps), p))
    p, _, _ = bc.instantiate_probe(os.path.join(mb, "launch.cu"), {"launches": 1})
    probes.append(("launch x1 (empty kernel)", p))
    designs = [
        ("ao_stream " + a.ao, inst("ao_stream", a.ao), "attention_output", AO),
        ("ao_stream noloop " + a.ao, inst("ao_stream", a.ao, "noloop"), "attention_output", AO),
        ("ao_stream nobar " + a.ao, inst("ao_stream", a.ao, "nobar"), "attention_output", AO),
        ("qkv_stream " + a.qkv, inst("qkv_stream", a.qkv), "project_qkv", QKV),
        ("qkv_stream noloop " + a.qkv, inst("qkv_stream", a.qkv, "noloop"), "project_qkv", QKV),
        ("qkv_stream nohead " + a.qkv, inst("qkv_stream", a.qkv, "nohead"), "project_qkv", QKV),
    ]
    files = [p for _, p in probes] + [d[1] for d in designs]
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for f, p in zip(files, pool.map(lambda f: subprocess.run([a.cudac, "compile", f, "--cache-dir", cache], capture_output=True, text=True, env=env), files)):
            if p.returncode:
                print("COMPILE FAILED", f, (p.stdout + p.stderr)[-1500:], flush=True)
    for name, p in probes:
        run(name, p, "probe", "batch=1")
    for name, p, k, s in designs:
        run(name, p, k, s)
    ncu = shutil.which("ncu") or next(iter(sorted(__import__("glob").glob("/opt/nvidia/nsight-compute/*/ncu")) + sorted(__import__("glob").glob("/usr/local/cuda/bin/ncu"))), None)
    ncu_out = {}
    if ncu:
        m = "gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
        for name, p, k, s, rx in [designs[0] + ("ao_stream",), designs[3] + ("qkv_stream",),
                                  ("ao_baseline", os.path.join(a.root, "dsl_templates/cuda-h200/baseline_attention_output.cu"), "attention_output", AO,
                                   "nvjet|gemv|gemm|rms|sm90|Kernel")]:
            try:
                r = subprocess.run([ncu, "--clock-control", "none", "--kernel-name", "regex:" + rx, "--launch-count", "3", "--metrics", m, "--csv",
                                    a.cudac, "run", p, "--kernel", k, "--seed", "1", "--repeat", "2", "--shape", s],
                                   capture_output=True, text=True, env=env, timeout=45)
                txt = "\n".join(l for l in (r.stdout + r.stderr).splitlines() if not l.startswith("==PROF==") and not l.startswith("{"))
            except subprocess.TimeoutExpired:
                txt = "timeout"
            ncu_out[name] = txt
            print("=== ncu", name, "\n" + txt[-3000:], flush=True)
    else:
        print("no ncu here", flush=True)
    _, dev, _ = 0, bc.lines_of(subprocess.run([a.cudac, "device"], capture_output=True, text=True).stdout), 0
    json.dump({"device": dev[0] if dev else {}, "rows": rows, "ncu": ncu_out}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
