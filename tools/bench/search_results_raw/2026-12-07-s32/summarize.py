#!/usr/bin/env python3
"""Session 32's figures, all scored exactly (npuc trace of each champion on its chip). Run from
anywhere: python3 summarize.py [-v]

  control   npuopt-screen before the capped scores (the race's plain signed-rank test): session
            30's run with the declared quantities (53 cells) + session 31's screen-rest (31 cells)
  capped    npuopt-screen with the capped signed-rank scores (score_cap 0.6, 4d89067), the same
            per-chip knowledge bases, cells in a seeded random order (cap-order.txt); cap/
  hill, random   as in session 31's summarize.py
  races     race rows of both runs, counted from their campaign databases by race_counts.py
            (races-control.json, races-capped.json)
"""
import json, os, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
from exact_cells import best_known, geomean, load, paired  # noqa: E402

verbose = '-v' in sys.argv
sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != '-v']

control = load('2026-12-06-s30/screen-quantities/*.json')
control.update(load('2026-12-07-s31/screen-rest/*.json'))
capped = load('2026-12-07-s32/cap/*.json')
hill = load('2026-12-06-s28-8params/hill/*.json')
hill.update(load('2026-12-06-s29/unseen-chips/hill/*.json'))
random_ = load('2026-12-06-s29/random/*.json')
random_.update(load('2026-12-06-s29/unseen-chips/random/*.json'))
random_.update(load('2026-12-07-s31/random-rest/*.json'))
best = best_known()


def status(cells, label):
    within = sum(v['exact'] <= 1.25 for v in cells.values())
    goal = [k for k, v in cells.items() if v['exact'] <= 1.25 or v['exact'] <= 1.05 * best[k]]
    worst = sorted(cells.items(), key=lambda kv: -kv[1]['exact'])[:3]
    differs = sum(v['vs_defaults'] == 'differs' for v in cells.values())
    print(f"{label}: {len(cells)} cells; geomean champion/min {geomean(v['exact'] for v in cells.values()):.4f}; "
          f"within 1.25x: {within}; within 1.25x or 1.05x of the best known: {len(goal)}; "
          f"geomean champion/best {geomean(v['exact'] / best[k] for k, v in cells.items()):.4f}; champions off the defaults: {differs}")
    print('   worst champion/min: ' + ', '.join(f"{k} {v['exact']:.3f}" for k, v in worst))
    misses = sorted(k for k, v in cells.items() if not (v['exact'] <= 1.25 or v['exact'] <= 1.05 * best[k]))
    print('   miss both goals: ' + (', '.join(f"{k} {cells[k]['exact']:.3f} (best {best[k]:.3f})" for k in misses) or 'none'))


def race_totals(path, cells):
    rows = json.load(open(path))
    total = {}
    for k in cells:
        for key, value in rows.get(k, {}).items():
            if key != 'db':
                total[key] = total.get(key, 0) + value
    return dict(sorted(total.items()))


subset = {k: control[k] for k in capped}
print('== the cells the capped run reached')
status(subset, 'control (plain scores)')
status(capped, 'capped scores')
paired(capped, control, 'capped / control')
for chips, label in (((5, 7, 11), 'chips 5, 7, 11 (outliers 4-5 %)'), ((1, 2, 3, 4, 6, 8, 9, 10, 12), 'the other chips')):
    names = {f'chip-{c}' for c in chips}
    paired({k: v for k, v in capped.items() if k.split('/')[0] in names}, control, f'   {label}')
print('== all 84 cells: control, with the capped run where it ran, hill and random')
merged = dict(control); merged.update(capped)
status(control, 'control')
status(merged, 'control with the capped run where it ran')
status(hill, 'hill')
status(random_, 'random')
paired(merged, hill, 'that / hill')
paired(merged, random_, 'that / random')
if os.path.exists(os.path.join(here, 'races-capped.json')):
    print('== race rows (candidate side) on the cells the capped run reached')
    print('   control:', race_totals(os.path.join(here, 'races-control.json'), capped))
    print('   capped: ', race_totals(os.path.join(here, 'races-capped.json'), capped))
if verbose:
    for k in sorted(capped):
        print(f"   {k:45s} control {control[k]['exact']:.3f} capped {capped[k]['exact']:.3f} best {best[k]:.3f}")
