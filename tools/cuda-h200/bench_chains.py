#!/usr/bin/env python3
"""Time the cuda-h200 chains on the GPU: per kernel and batch, the eager baseline (cuBLAS +
separate kernels), the same baseline replayed as a CUDA graph, each template at its defaults and
any design given with --design KERNEL=FILE (a campaign's champion). Every design is first checked
(`cudac run --check`: fresh inputs, poisoned outputs, float32 CPU reference), then timed with
`--repeat N` (each launch after an L2 flush, timed alone by CUDA events). The copy bandwidth is
measured in the same session with the copy probe. Writes one JSON file and prints a table.

  bench_chains.py --cudac BIN --root DIR [--batches 1,4,8] [--repeat 30] [--design K=FILE ...] --out FILE
"""
import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import yaml


def lines_of(output):
    out = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def instantiate(template_yaml, overrides=None):
    spec = yaml.safe_load(open(template_yaml))
    source = open(os.path.join(os.path.dirname(template_yaml), spec["source"])).read()
    values = {name: p["default"] for name, p in spec["params"].items()}
    values.update(overrides or {})
    for name, value in values.items():
        source = source.replace("${%s}" % name, str(value))
    assert "${" not in source, template_yaml
    fd, path = tempfile.mkstemp(suffix=".cu", prefix=spec["template"] + ".")
    os.write(fd, source.encode())
    os.close(fd)
    return spec["kernel"], path, values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudac", required=True)
    ap.add_argument("--root", required=True, help="folder holding knowledge/, dsl_templates/, microbench/")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--design", action="append", default=[], help="KERNEL=FILE (any batch) or KERNEL@BATCH=FILE")
    ap.add_argument("--variant", action="append", default=[],
                    help="TEMPLATE:P=V,P=V — a template (name without .template.yaml) at these parameters, default otherwise")
    ap.add_argument("--kernels", default="project_qkv,attention_output,feedforward")
    ap.add_argument("--torch", action="store_true", help="also time the chains as eager PyTorch and under torch.cuda.graphs (torch_chains.py)")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per cudac call (a hung design must not stop the session)")
    ap.add_argument("--quick", action="store_true", help="designs other than the baselines in queued mode only (no host-timed row)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    cache = tempfile.mkdtemp(prefix="cudac-cache.")
    env = dict(os.environ, CUDAC_CACHE_DIR=cache)
    kernels_yaml = yaml.safe_load(open(os.path.join(args.root, "knowledge/cuda-h200/kernels.yaml")))
    tdir = os.path.join(args.root, "dsl_templates/cuda-h200")
    wanted = args.kernels.split(",")
    batches = [int(b) for b in args.batches.split(",")]

    def cudac(*argv, check=False):
        try:  # a design that hangs (a grid barrier over blocks that are not resident) must not stop the session
            proc = subprocess.run([args.cudac, *argv], capture_output=True, text=True, env=env, timeout=args.timeout)
        except subprocess.TimeoutExpired as e:
            return 124, [], "timed out after %d s: %s" % (args.timeout, " ".join(argv))
        return proc.returncode, lines_of(proc.stdout), proc.stdout + proc.stderr

    _, dev, _ = cudac("device")
    device = dev[0] if dev else {}
    print("device:", json.dumps(device), flush=True)

    designs = {}  # kernel -> list of (name, file, params, batch or None)
    for k in kernels_yaml["kernels"]:
        if k["name"] in wanted:
            designs[k["name"]] = [("baseline", os.path.join(tdir, k["baseline"]), {}, None)]
    for name in sorted(os.listdir(tdir)):
        if name.endswith(".template.yaml"):
            kernel, path, values = instantiate(os.path.join(tdir, name))
            if kernel in designs:
                designs[kernel].append((name.replace(".template.yaml", "") + "@defaults", path, values, None))
    for item in args.variant:
        tname, _, spec = item.partition(":")
        overrides = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
        kernel, path, values = instantiate(os.path.join(tdir, tname + ".template.yaml"), overrides)
        if kernel in designs:
            designs[kernel].append((tname + "@" + spec, path, values, None))
    for item in args.design:
        key, path = item.split("=", 1)
        kernel, _, batch = key.partition("@")
        designs.setdefault(kernel, []).append(("design:" + os.path.basename(path), path, {}, int(batch) if batch else None))

    copy_src, _, _ = instantiate_probe(os.path.join(args.root, "microbench/cuda-h200/copy.cu"), {"bytes": 1 << 30})
    files = {d[1] for ds in designs.values() for d in ds} | {copy_src}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        compiled = dict(zip(files, pool.map(lambda f: cudac("compile", f, "--cache-dir", cache), files)))
    for f, (rc, lines, text) in compiled.items():
        if rc != 0:
            print("COMPILE FAILED", f, text[-2000:], flush=True)

    rc, lines, _ = cudac("run", copy_src, "--kernel", "probe", "--seed", "1", "--repeat", "10", "--shape", "batch=1")
    copy_ns = statistics.median([l["cycles"] for l in lines if l.get("type") == "run"]) if rc == 0 else None
    copy_bpns = 2 * (1 << 30) / copy_ns if copy_ns else None
    print("copy bandwidth (1 GiB, read + written): %.1f GB/s" % (copy_bpns or 0), flush=True)

    rows = []
    for kspec in kernels_yaml["kernels"]:
        kernel = kspec["name"]
        if kernel not in designs:
            continue
        for batch in batches:
            shape_vals = dict(kspec["shapes"]["gemma4-12b-b1"])
            shape_vals["batch"] = batch
            shape = ",".join("%s=%d" % kv for kv in sorted(shape_vals.items()))
            weight_bytes = 0
            for t in kspec["tensors"]:
                if t["role"] == "weight":
                    n = 1
                    for dim in t["shape"]:
                        n *= eval(str(dim), {}, dict(shape_vals))
                    weight_bytes += n * 2
            for name, path, values, only_batch in designs[kernel]:
                if only_batch is not None and only_batch != batch:
                    continue
                if name == "baseline":
                    modes = [("eager", []), ("eager-idle", ["--launch-mode", "idle"]), ("graph", ["--graph"]),
                             ("graph-idle", ["--graph", "--launch-mode", "idle"])]
                elif args.quick:
                    modes = [("alone", [])]
                else:
                    modes = [("alone", []), ("alone-idle", ["--launch-mode", "idle"])]
                verify = None
                for mode, extra in modes:
                    row = {"kernel": kernel, "batch": batch, "design": name, "mode": mode, "params": values,
                           "shape": shape, "weight_bytes": weight_bytes}
                    if verify is None:  # checked once per design (fresh inputs, poisoned outputs)
                        rc, lines, text = cudac("run", path, "--kernel", kernel, "--seed", "11", "--repeat", "2",
                                                "--shape", shape, "--check", *extra)
                        verify = next((l for l in lines if l.get("type") == "verify"), None) or {}
                    row["verify"] = verify
                    if not verify.get("passed"):
                        row["error"] = text[-1500:]
                        rows.append(row)
                        print("%-17s b%d %-28s %-10s FAILED: %s" % (kernel, batch, name, mode,
                              (verify or {}).get("max_rel_err", text[-300:])), flush=True)
                        continue
                    rc, lines, text = cudac("run", path, "--kernel", kernel, "--seed", "12", "--repeat",
                                            str(args.repeat), "--shape", shape, *extra)
                    cycles = [l["cycles"] for l in lines if l.get("type") == "run"]
                    if rc != 0 or not cycles:
                        row["error"] = text[-1500:]
                        rows.append(row)
                        continue
                    row["cycles_ns"] = cycles
                    row["median_ns"] = statistics.median(cycles)
                    row["min_ns"] = min(cycles)
                    row["bytes_per_ns"] = weight_bytes / row["median_ns"]
                    row["share_of_copy"] = row["bytes_per_ns"] / copy_bpns if copy_bpns else None
                    rows.append(row)
                    print("%-17s b%d %-28s %-10s %9.1f us  (min %8.1f)  %6.0f GB/s  %5.1f%% of copy  err %.2e" % (
                        kernel, batch, name, mode, row["median_ns"] / 1e3, row["min_ns"] / 1e3, row["bytes_per_ns"],
                        100 * (row["share_of_copy"] or 0), verify["max_rel_err"]), flush=True)
    if args.torch:  # eager PyTorch and torch.cuda.graphs, same flush and timing, same session
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        try:
            import torch_chains
            for row in torch_chains.run(batches, args.repeat):
                if row["kernel"] not in wanted:
                    continue
                row["bytes_per_ns"] = row["weight_bytes"] / row["median_ns"]
                row["share_of_copy"] = row["bytes_per_ns"] / copy_bpns if copy_bpns else None
                rows.append(row)
                print("%-17s b%d %-28s %-16s %9.1f us  (min %8.1f)  %6.0f GB/s  %5.1f%% of copy" % (
                    row["kernel"], row["batch"], "torch " + row["torch"], row["mode"], row["median_ns"] / 1e3,
                    row["min_ns"] / 1e3, row["bytes_per_ns"], 100 * (row["share_of_copy"] or 0)), flush=True)
        except Exception as e:  # no torch on this machine: the cudac rows still count
            print("torch chains failed:", repr(e), flush=True)
    json.dump({"device": device, "copy_bytes_per_ns": copy_bpns, "copy_median_ns": copy_ns, "repeat": args.repeat,
               "rows": rows}, open(args.out, "w"), indent=1)


def instantiate_probe(path, values):
    source = open(path).read()
    for name, value in values.items():
        source = source.replace("${%s}" % name, str(value))
    fd, out = tempfile.mkstemp(suffix=".cu", prefix="probe.")
    os.write(fd, source.encode())
    os.close(fd)
    return out, None, None


if __name__ == "__main__":
    main()
