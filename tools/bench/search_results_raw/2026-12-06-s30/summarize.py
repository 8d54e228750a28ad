#!/usr/bin/env python3
"""Session 30. Every figure twice: as `bench search` measured it (champion_over_min: the median of
7 launches, with the chip's launch noise and time-of-day drift) and exact (exact.jsonl, made by
tools/bench/exact_champions.py: the same champion through `npuc trace`, no noise, no drift).

Runs: session 28's 72 cells (npuopt-screen, hill), session 29's random (39 cells) and chips 9-12
(12 cells, three strategies), and this session's npuopt-screen with the declared-quantity change
(screen-quantities, 53 cells) and without it (screen-control, 25 of the same cells, same binary,
knowledge bases and session), and v2 (the weight stream on every engine too; the first 15 cells).
Usage: python3 summarize.py [-v]"""
import glob, json, math, os, sys
here = os.path.dirname(os.path.abspath(__file__))
raw = os.path.dirname(here)
best = json.load(open(os.path.join(raw, '..', 'search_best_known.json')))['cells']
runs = {'s28 screen': '2026-12-06-s28-8params/screen/', 's28 hill': '2026-12-06-s28-8params/hill/', 's29 random': '2026-12-06-s29/random/',
        's29 unseen screen': '2026-12-06-s29/unseen-chips/npuopt-screen/', 's29 unseen hill': '2026-12-06-s29/unseen-chips/hill/',
        's29 unseen random': '2026-12-06-s29/unseen-chips/random/', 'new': '2026-12-06-s30/screen-quantities/',
        'control': '2026-12-06-s30/screen-control/', 'v2': '2026-12-06-s30/screen-v2-stream-on-all-engines/'}
data = {name: {} for name in runs}
for line in open(os.path.join(here, 'exact.jsonl')):
    r = json.loads(line)
    for name, prefix in runs.items():
        if prefix in r['file']:
            data[name][r['cell']] = r
def chip(k): return int(k.split('/')[0].split('-')[1])
def cmp(label, a, b, cells=None, key='exact_over_min'):
    ks = sorted(k for k in data[a] if k in data[b] and (cells is None or cells(k)))
    if not ks: return
    r = [math.log(data[a][k][key] / data[b][k][key]) for k in ks]
    m = sum(r) / len(r); sd = (sum((x - m) ** 2 for x in r) / (len(r) - 1)) ** .5
    gm = lambda d: math.exp(sum(math.log(data[d][k][key]) for k in ks) / len(ks))
    same = sum(abs(x) < 1e-12 for x in r)
    print(f"{label:55s} {len(ks):3d} cells  {gm(a):.3f} / {gm(b):.3f} = {math.exp(m):.4f} (se {sd / len(r) ** .5:.4f})  "
          f"better {sum(x < -1e-12 for x in r)}, worse {sum(x > 1e-12 for x in r)}, same {same}")
for key in ['measured_over_min', 'exact_over_min']:
    print(f'## {key}')
    cmp('new / control (paired, this session)', 'new', 'control', key=key)
    cmp('  chips 1-8', 'new', 'control', lambda k: chip(k) <= 8, key=key)
    cmp('  chips 9-12', 'new', 'control', lambda k: chip(k) >= 9, key=key)
    cmp('v2 / control (the weight stream on every engine too)', 'v2', 'control', key=key)
    cmp('control / s28 screen (the same code, chips 1-8)', 'control', 's28 screen', key=key)
    cmp('control / s29 unseen screen (the same code, chips 9-12)', 'control', 's29 unseen screen', key=key)
    cmp('s28 screen / s28 hill (72 cells)', 's28 screen', 's28 hill', key=key)
    cmp('s28 screen / s29 random (39 cells)', 's28 screen', 's29 random', key=key)
    cmp('s28 hill / s29 random', 's28 hill', 's29 random', key=key)
    cmp('s29 unseen: screen / hill', 's29 unseen screen', 's29 unseen hill', key=key)
    cmp('s29 unseen: screen / random', 's29 unseen screen', 's29 unseen random', key=key)
    cmp('new / s28 hill (chips 1-8)', 'new', 's28 hill', key=key)
    cmp('new / s29 unseen hill (chips 9-12)', 'new', 's29 unseen hill', key=key)
print('## measured / exact: what noise and drift add to a cell\'s final figure')
for name in runs:
    f = [r['measured_over_min'] / r['exact_over_min'] for r in data[name].values()]
    if f: print(f"{name:20s} {len(f):3d} cells  geomean {math.exp(sum(map(math.log, f)) / len(f)):.4f}  min {min(f):.3f}  max {max(f):.3f}")
print('## exact, per strategy over the 72 cells of session 28 (npuopt-screen / hill)')
ks = sorted(data['s28 screen'])
for name in ['s28 screen', 's28 hill']:
    xs = [data[name][k]['exact_over_min'] for k in ks]
    print(f"{name}: geomean {math.exp(sum(map(math.log, xs)) / len(xs)):.3f}, within 1.25x {sum(x <= 1.25 for x in xs)}, worst {max(xs):.3f} ({max(ks, key=lambda k: data[name][k]['exact_over_min'])})")
if '-v' in sys.argv:
    print('| cell | new | control | s28 screen | s28 hill | (exact) |')
    for k in sorted(data['new'], key=lambda k: (chip(k), k)):
        f = lambda d: f"{data[d][k]['exact_over_min']:.3f}" if k in data[d] else '–'
        print(f"| {k} | {f('new')} | {f('control')} | {f('s28 screen') if chip(k) <= 8 else f('s29 unseen screen')} | {f('s28 hill') if chip(k) <= 8 else f('s29 unseen hill')} |")
