#!/usr/bin/env python3
"""What each template param is worth at the best designs known.

For every cell of tools/bench/search_best_known.json (chip/shape/kernel) and every param whose value
there departs from the template's default, the design with that one param set back to its default
is run on npu-sim beside the best design itself (median of --base-repeat and --alt-repeat runs, one
seed), and the ratio alt / best is written as one JSON line. `--summary FILE` prints, per template
and param, how many best designs depart from the default, the sum of log ratios (its geomean cost
times the template's cell count), the largest ratio and how many designs no longer run once set back
(ratio null: most often the design no longer fits DM).

  tools/bench/param_sensitivity.py --work W --out FILE [--part I --parts N]   # W: a search_bench --work dir
  tools/bench/param_sensitivity.py --summary FILE

The chips' profiles are read from W/chip-N/chip.profile and checked against the best-known file's
sha256, so the runs are on the very chips the best designs were found on. Templates are read from
dsl_templates/npu-sim at the current checkout: run it at the commit whose params you want to judge
(session 28 ran it at 3ed9edf, before the cut). A best design with a param the template no longer has is
skipped with a message: it is a point of an older version of the template.
"""
import argparse, collections, hashlib, json, math, os, statistics, subprocess, sys, tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = os.path.join(ROOT, 'dsl_templates', 'npu-sim')


def defaults_of(template):
    spec = yaml.safe_load(open(os.path.join(TEMPLATES, template + '.template.yaml')))
    return {name: p['default'] for name, p in spec['params'].items()}


def named_shapes():
    """(shape name, kernel) -> npuc's --shape argument, from the target's kernels.yaml."""
    spec = yaml.safe_load(open(os.path.join(ROOT, 'knowledge', 'npu-sim', 'kernels.yaml')))
    return {(name, kernel['name']): ','.join(f'{k}={v}' for k, v in values.items())
            for kernel in spec['kernels'] for name, values in (kernel.get('shapes') or {}).items()}


def measure(npuc, template, params, kernel, shape, profile, repeat, scratch):
    fd, path = tempfile.mkstemp(suffix='.rs', dir=scratch)
    os.close(fd)
    try:
        subprocess.run([os.path.join(TEMPLATES, 'instantiate.sh'), os.path.join(TEMPLATES, template + '.template.yaml'),
                        '-o', path] + [f'{k}={v}' for k, v in params.items()], check=True, capture_output=True)
        env = dict(os.environ, NPU_SIM_PROFILE=profile, NPUC_CACHE_DIR=os.path.join(scratch, 'cache'))
        r = subprocess.run([npuc, 'run', path, '--kernel', kernel, '--seed', '1', '--repeat', str(repeat), '--shape', shape,
                            '--message-format', 'json'], capture_output=True, text=True, env=env, timeout=600)
    finally:
        os.unlink(path)
    cycles = []
    for line in r.stdout.splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if 'cycles' in j:
            cycles.append(j['cycles'])
    return (statistics.median(cycles), '') if cycles else (None, (r.stdout + r.stderr)[-300:])


def run(args):
    best = json.load(open(os.path.join(ROOT, 'tools/bench/search_best_known.json')))['cells']
    shapes = named_shapes()
    done = set()
    if os.path.exists(args.out):
        for line in open(args.out):
            j = json.loads(line)
            done.add((j['cell'], j['param']))
    scratch = tempfile.mkdtemp(prefix='param-sensitivity-')
    defaults = {}
    with open(args.out, 'a') as out:
        for i, cell in enumerate(sorted(best)):
            if i % args.parts != args.part:
                continue
            chip, shape_name, kernel = cell.split('/')
            known = best[cell]
            template = known['template']
            defaults.setdefault(template, defaults_of(template))
            profile = os.path.join(args.work, chip, 'chip.profile')
            if hashlib.sha256(open(profile, 'rb').read()).hexdigest() != known['profile_sha256']:
                raise SystemExit(f'{profile}: not the chip {cell} was found on (sha256 differs)')
            shape = shapes[(shape_name, kernel)]
            params = known['params']
            gone = sorted(set(params) - set(defaults[template]))
            if gone:  # a design of an older version of the template: not this template's point
                print(f'{cell}: skipped, params the template no longer has: {", ".join(gone)}', file=sys.stderr)
                continue
            base = None
            for name in sorted(params):
                default = defaults[template].get(name)
                if default is None or params[name] == default or (cell, name) in done:
                    continue
                if base is None:
                    base, _ = measure(args.npuc, template, params, kernel, shape, profile, args.base_repeat, scratch)
                alt, err = measure(args.npuc, template, dict(params, **{name: default}), kernel, shape, profile,
                                   args.alt_repeat, scratch)
                out.write(json.dumps({'cell': cell, 'template': template, 'param': name, 'champ_value': params[name],
                                      'default': default, 'base': base, 'alt': alt,
                                      'ratio': alt / base if alt and base else None, 'err': err}) + '\n')
                out.flush()


def summary(path):
    rows = [json.loads(line) for line in open(path)]
    by = collections.defaultdict(list)
    for r in rows:
        if 'transient' in (r.get('err') or ''):
            continue  # a device hiccup, not the design
        by[(r['template'], r['param'])].append(r['ratio'])
    for template in sorted({t for t, _ in by}):
        print(f'{template}')
        items = [(p, v) for (t, p), v in by.items() if t == template]
        items.sort(key=lambda pv: -sum(math.log(x) for x in pv[1] if x))
        for p, v in items:
            ok = [x for x in v if x]
            print(f'  {p:10s} departs in {len(v):2d}  sum log {sum(math.log(x) for x in ok):6.3f}  '
                  f'max {max(ok) if ok else float("nan"):.3f}  no longer runs {len(v) - len(ok)}')


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--work')
    ap.add_argument('--out')
    ap.add_argument('--npuc', default=os.path.join(ROOT, 'build/npu-sim/1.0/bin/npuc'))
    ap.add_argument('--part', type=int, default=0)
    ap.add_argument('--parts', type=int, default=1)
    ap.add_argument('--base-repeat', type=int, default=9)
    ap.add_argument('--alt-repeat', type=int, default=5)
    ap.add_argument('--summary')
    a = ap.parse_args()
    if a.summary:
        summary(a.summary)
    elif a.work and a.out:
        run(a)
    else:
        ap.error('give --work and --out, or --summary')
