#!/usr/bin/env python3
"""Re-score `bench search` champions without launch noise or time drift.

`bench search` divides a champion's re-measured median (7 launches, each with the chip's noise,
outliers and its time-of-day drift: up to 2 x drift_per_hour, 4 % on a generated chip) by the
weight-movement minimum. Two runs of the same cells at different times of day therefore differ
by a few per cent with no change to the search. This script instantiates each champion from its
result file (template + params), runs it through `npuc trace` on the cell's chip (the simulator's
own model cycles, no noise, no drift: the quantity the launches scatter around) and prints one
JSON line per cell with exact_over_min beside the measured champion_over_min.

    tools/bench/exact_champions.py BUILD_DIR RESULT.json... > exact.jsonl

The chip of a cell is regenerated from its seed (npu-sim-profile); a result from a fixed profile
is skipped. This is a judging tool: it reads the simulator's internals, npuopt never does.
"""
import json, os, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
build = os.path.abspath(sys.argv[1])
npuc = os.path.join(build, 'npu-sim', '1.0', 'bin', 'npuc')
gen = os.path.join(build, 'npu-sim', 'tools', 'npu-sim-profile')
templates = os.path.join(root, 'dsl_templates', 'npu-sim')
scratch = tempfile.mkdtemp(prefix='exact-champions-')

def shape_arg(j):
    return ','.join(f'{k}={v}' for k, v in sorted(j['shape_values'].items()))

def chip_profile(chip):
    path = os.path.join(scratch, chip + '.profile')
    if not os.path.exists(path):
        subprocess.run([gen, chip.split('-')[1], '--out', path], check=True, capture_output=True)
    return path

def one(path):
    j = json.load(open(path))
    if not j.get('chip', '').startswith('chip-') or not j.get('champion_template') or not j.get('true_min_cycles'):
        return None
    cell = f"{j['chip']}/{j['shape']}/{j['kernel']}"
    params = [f'{k}={v}' for k, v in sorted(j['champion_params'].items())]
    src = os.path.join(scratch, f"{cell.replace('/', '_')}_{j['strategy']}_{os.getpid()}_{abs(hash(path))}.rs")
    inst = subprocess.run([os.path.join(templates, 'instantiate.sh'), os.path.join(templates, j['champion_template'] + '.template.yaml'),
                           '-o', src] + params, capture_output=True, text=True)
    if inst.returncode != 0:
        return {'cell': cell, 'strategy': j['strategy'], 'file': path, 'error': inst.stderr.strip()[:300]}
    env = dict(os.environ, NPU_SIM_PROFILE=chip_profile(j['chip']), NPUC_CACHE_DIR=os.path.join(scratch, 'cache'))
    out = subprocess.run([npuc, 'trace', src, '--kernel', j['kernel'], '--seed', '1', '--shape', shape_arg(j)],
                         capture_output=True, text=True, env=env, cwd=scratch)
    try:
        dev = json.loads(out.stdout.strip().splitlines()[-1])['dev_cycles']
    except Exception:
        return {'cell': cell, 'strategy': j['strategy'], 'file': path, 'error': (out.stdout + out.stderr).strip()[:300]}
    return {'cell': cell, 'strategy': j['strategy'], 'file': path, 'measured_over_min': j['champion_over_min'],
            'exact_over_min': dev / j['true_min_cycles'], 'dev_cycles': dev, 'true_min_cycles': j['true_min_cycles']}

os.makedirs(os.path.join(scratch, 'cache'), exist_ok=True)
for chip in sorted({json.load(open(p)).get('chip', '') for p in sys.argv[2:]}):
    if chip.startswith('chip-'):
        chip_profile(chip)
with ThreadPoolExecutor(2) as pool:
    for row in pool.map(one, sys.argv[2:]):
        if row:
            print(json.dumps(row), flush=True)
