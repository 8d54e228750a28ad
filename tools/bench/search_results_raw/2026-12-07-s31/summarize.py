#!/usr/bin/env python3
"""Session 31's figures, all scored exactly (npuc trace of each champion on its chip: no launch
noise, no time-of-day drift). Run from anywhere: python3 summarize.py [-v]

  control        npuopt-screen at the code before the second look (HEAD f6d9ce6 for search):
                 session 30's run with the declared quantities (53 cells) + this session's
                 screen-rest/ (the other 31 of session 28's 72 cells on chips 1-8)
  hill, random   session 28 (72 cells) and 29 (chips 9-12; random 39 + 12 cells), random also
                 this session's random-rest/ (the other 33 of the 72)
  second-look    npuopt-screen with the outlier-aware quick reject (28 cells), paired with control
                 (reverted: e3f15b7)
  best known     tools/bench/search_best_known.json as rebuilt on exact figures this session
"""
import os, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
from exact_cells import best_known, geomean, load, paired  # noqa: E402

verbose = '-v' in sys.argv

control = load('2026-12-06-s30/screen-quantities/*.json')
control.update(load('2026-12-07-s31/screen-rest/*.json'))
hill = load('2026-12-06-s28-8params/hill/*.json')
hill.update(load('2026-12-06-s29/unseen-chips/hill/*.json'))
random_ = load('2026-12-06-s29/random/*.json')
random_.update(load('2026-12-06-s29/unseen-chips/random/*.json'))
random_.update(load('2026-12-07-s31/random-rest/*.json'))
second = load('2026-12-07-s31/second-look/*.json')
best = best_known()


def status(cells, label):
    within = sum(v['exact'] <= 1.25 for v in cells.values())
    goal = [k for k, v in cells.items() if v['exact'] <= 1.25 or v['exact'] <= 1.05 * best[k]]
    worst = sorted(cells.items(), key=lambda kv: -kv[1]['exact'])[:3]
    worst_best = sorted(cells.items(), key=lambda kv: -kv[1]['exact'] / best[kv[0]])[:3]
    differs = sum(v['vs_defaults'] == 'differs' for v in cells.values())
    print(f"{label}: {len(cells)} cells; geomean champion/min {geomean(v['exact'] for v in cells.values()):.4f} "
          f"(re-measured {geomean(v['measured'] for v in cells.values()):.4f}); within 1.25x: {within}; "
          f"within 1.25x or 1.05x of the best known: {len(goal)}; geomean champion/best {geomean(v['exact'] / best[k] for k, v in cells.items()):.4f}; "
          f"champions off the defaults: {differs}")
    print('   worst champion/min: ' + ', '.join(f"{k} {v['exact']:.3f}" for k, v in worst))
    print('   worst champion/best: ' + ', '.join(f"{k} {v['exact'] / best[k]:.3f} ({v['exact']:.3f} vs {best[k]:.3f})" for k, v in worst_best))
    if verbose:
        for k, v in sorted(cells.items()):
            mark = '' if v['exact'] <= 1.25 or v['exact'] <= 1.05 * best[k] else '  <- misses both'
            print(f"     {k:45s} {v['exact']:.3f}  best {best[k]:.3f}{mark}")


print('== the code before the second look (control), hill and random, exact')
status(control, 'npuopt-screen')
status(hill, 'hill')
status(random_, 'random')
paired(control, hill, 'npuopt-screen / hill')
paired(control, random_, 'npuopt-screen / random')
print('== the second look (outlier-aware quick reject)')
paired(second, control, 'second look / control')
for chips, label in ((range(1, 9), 'chips 1-8'), (range(9, 13), 'chips 9-12')):
    names = {f'chip-{c}' for c in chips}
    paired({k: v for k, v in second.items() if k.split('/')[0] in names}, control, f'   {label}')
status(second, 'second look')
merged = dict(control); merged.update(second)
status(merged, 'control with the second look where it ran')
paired(merged, hill, 'that / hill')
paired(merged, random_, 'that / random')
if verbose:
    for k in sorted(set(second) & set(control)):
        print(f"   {k:45s} control {control[k]['exact']:.3f} second look {second[k]['exact']:.3f}")
