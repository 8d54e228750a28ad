#!/usr/bin/env python3
"""Re-score `bench search` champions without launch noise or time drift.

`bench search` divides a champion's re-measured median (7 launches, each with the chip's noise,
outliers and its time-of-day drift: up to 2 x drift_per_hour, 4 % on a generated chip) by the
weight-movement minimum. Two runs of the same cells at different times of day therefore differ
by a few per cent with no change to the search. This script instantiates each champion from its
result file (template + params), runs it through `npuc trace` on the cell's chip (the simulator's
own model cycles, no noise, no drift: the quantity the launches scatter around) and prints one
JSON line per cell with exact_over_min beside the measured champion_over_min. (Since session 31
`bench search` writes exact_over_min into its result files itself; this script scores the older
ones, and tools/bench/rebuild_best_known.py uses it for the best-known file.)

    tools/bench/exact_champions.py BUILD_DIR RESULT.json... > exact.jsonl

The chip of a cell is regenerated from its seed (npu-sim-profile); a result from a fixed profile
is skipped. A champion whose parameters the current template no longer has is instantiated from
the newest earlier version of its template (git history) that has them. This is a judging tool:
it reads the simulator's internals, npuopt never does.
"""
import hashlib, json, os, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
templates = os.path.join(root, 'dsl_templates', 'npu-sim')
scratch = tempfile.mkdtemp(prefix='exact-champions-')
build = None


def setup(build_dir):
    global build
    build = os.path.abspath(build_dir)
    os.makedirs(os.path.join(scratch, 'cache'), exist_ok=True)


def shape_arg(shape_values):
    return ','.join(f'{k}={v}' for k, v in sorted(shape_values.items()))


def chip_profile(chip):
    path = os.path.join(scratch, chip + '.profile')
    if not os.path.exists(path):
        gen = os.path.join(build, 'npu-sim', 'tools', 'npu-sim-profile')
        subprocess.run([gen, chip.split('-')[1], '--out', path + '.tmp'], check=True, capture_output=True)
        os.replace(path + '.tmp', path)
    return path


def profile_sha256(chip):
    return hashlib.sha256(open(chip_profile(chip), 'rb').read()).hexdigest()


def older_template_dirs(template):
    """dsl_templates/npu-sim of each earlier commit that changed the template, newest first."""
    log = subprocess.run(['git', '-C', root, 'log', '--format=%H', '--', f'dsl_templates/npu-sim/{template}.template.yaml'],
                         capture_output=True, text=True).stdout.split()
    for commit in log:
        dest = os.path.join(scratch, 'git', commit)
        if not os.path.isdir(dest):
            os.makedirs(dest + '.tmp', exist_ok=True)
            archive = subprocess.run(['git', '-C', root, 'archive', commit, 'dsl_templates/npu-sim'], capture_output=True)
            subprocess.run(['tar', '-x', '-C', dest + '.tmp'], input=archive.stdout, check=True)
            os.replace(dest + '.tmp', dest)
        yield commit, os.path.join(dest, 'dsl_templates', 'npu-sim')


def instantiate(template, params, src):
    """Instantiate from the current template, else the newest earlier one that has the params;
    returns (commit or 'HEAD', error)."""
    args = [f'{k}={v}' for k, v in sorted(params.items())]
    def attempt(dir_):
        return subprocess.run([os.path.join(dir_, 'instantiate.sh'), os.path.join(dir_, template + '.template.yaml'), '-o', src] + args,
                              capture_output=True, text=True)
    first = attempt(templates)
    if first.returncode == 0:
        return 'working tree', None
    if 'has no param' not in first.stderr:
        return None, first.stderr.strip()[:300]
    for commit, dir_ in older_template_dirs(template):
        if attempt(dir_).returncode == 0:
            return commit, None
    return None, first.stderr.strip()[:300]


def trace(src, kernel, shape_values, chip):
    env = dict(os.environ, NPU_SIM_PROFILE=chip_profile(chip), NPUC_CACHE_DIR=os.path.join(scratch, 'cache'))
    npuc = os.path.join(build, 'npu-sim', '1.0', 'bin', 'npuc')
    out = subprocess.run([npuc, 'trace', src, '--kernel', kernel, '--seed', '1', '--shape', shape_arg(shape_values)],
                         capture_output=True, text=True, env=env, cwd=scratch)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])['dev_cycles'], None
    except Exception:
        return None, (out.stdout + out.stderr).strip()[:300]


def score(chip, shape_values, kernel, template, params, tag):
    """(dev_cycles, template version, error) of a design on a generated chip."""
    src = os.path.join(scratch, f"{chip}_{kernel}_{tag}_{os.getpid()}.rs")
    version, error = instantiate(template, params, src)
    if error:
        return None, None, error
    dev, error = trace(src, kernel, shape_values, chip)
    return dev, version, error


def one(path):
    j = json.load(open(path))
    if not j.get('chip', '').startswith('chip-') or not j.get('champion_template') or not j.get('true_min_cycles'):
        return None
    cell = f"{j['chip']}/{j['shape']}/{j['kernel']}"
    dev, version, error = score(j['chip'], j['shape_values'], j['kernel'], j['champion_template'], j['champion_params'],
                                abs(hash(path)))
    if error:
        return {'cell': cell, 'strategy': j['strategy'], 'file': path, 'error': error}
    row = {'cell': cell, 'strategy': j['strategy'], 'file': path, 'measured_over_min': j['champion_over_min'],
           'exact_over_min': dev / j['true_min_cycles'], 'dev_cycles': dev, 'true_min_cycles': j['true_min_cycles']}
    if version != 'working tree':
        row['template_commit'] = version
    return row


def score_files(paths):
    for chip in sorted({json.load(open(p)).get('chip', '') for p in paths}):
        if chip.startswith('chip-'):
            chip_profile(chip)
    with ThreadPoolExecutor(2) as pool:
        yield from (row for row in pool.map(one, paths) if row)


if __name__ == '__main__':
    setup(sys.argv[1])
    for row in score_files(sys.argv[2:]):
        print(json.dumps(row), flush=True)
