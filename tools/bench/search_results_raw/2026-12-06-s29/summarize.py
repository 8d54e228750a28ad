# Session 29's figures (tools/bench/search_results.md): run from the repository root,
#   python3 tools/bench/search_results_raw/2026-12-06-s29/summarize.py
# The long-search table compares with the best-known file as it was before this session's
# recording (git show 328c164:tools/bench/search_best_known.json); the rest with the file now.
import json, glob, math, subprocess
B = 'tools/bench/'
bk = json.load(open(B + 'search_best_known.json'))['cells']
bk_before = json.loads(subprocess.run(['git', 'show', '328c164:tools/bench/search_best_known.json'], capture_output=True, text=True, check=True).stdout)['cells']
R = B + 'search_results_raw/2026-12-06-s28-8params/'
def load(pattern):
    out = {}
    for f in glob.glob(pattern):
        d = json.load(open(f)); out[(d['chip'], d['shape'], d['kernel'])] = d
    return out
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float('nan')
hill = load(R + 'hill/*.json'); scr = load(R + 'screen/*.json')
# long searches
print('## long searches (1000 runs)')
lh = load(''+B+'search_results_raw/2026-12-06-s29/long-hill-1000/*.json'); ls = load(''+B+'search_results_raw/2026-12-06-s29/long-screen-1000/*.json')
for k in sorted(set(lh) | set(ls), key=lambda k: int(k[0].split('-')[1])):
    b = bk_before['/'.join(k)]['champion_over_min']
    longbest = min([x[k]['champion_over_min'] for x in (lh, ls) if k in x])
    print('| %s %s %s | %s | %s | %.3f | %.3f | %.3f | %.3f | %+.1f %% |' % (k[0], k[1], k[2],
        '%.3f' % lh[k]['champion_over_min'] if k in lh else '-',
        '%.3f (%d runs%s)' % (ls[k]['champion_over_min'], ls[k]['device_runs_used'], ', exhausted' if ls[k]['kernel_status']=='exhausted' else '') if k in ls else '-',
        b, hill[k]['champion_over_min'], scr[k]['champion_over_min'], longbest, 100 * (longbest / b - 1)))
ks = sorted(set(lh) | set(ls))
print('cells', len(ks), 'geomean best-known before', g([bk_before['/'.join(k)]['champion_over_min'] for k in ks]),
      'long best', g([min([x[k]['champion_over_min'] for x in (lh, ls) if k in x]) for k in ks]),
      'hill100', g([hill[k]['champion_over_min'] for k in ks]), 'screen100', g([scr[k]['champion_over_min'] for k in ks]))
# ceiling
keys = sorted(set(hill) & set(scr))
print('72 cells, best-known file now: best-known', g([bk['/'.join(k)]['champion_over_min'] for k in keys]), 'hill/best', g([hill[k]['champion_over_min'] / bk['/'.join(k)]['champion_over_min'] for k in keys]),
      'screen/best', g([scr[k]['champion_over_min'] / bk['/'.join(k)]['champion_over_min'] for k in keys]))
# random
print('## random 8-param')
rnd = load(''+B+'search_results_raw/2026-12-06-s29/random/*.json')
ks = sorted(rnd)
if ks:
    for name, x in (('random', rnd), ('hill', hill), ('screen', scr)):
        v = [x[k]['champion_over_min'] for k in ks]
        goal = sum(1 for k in ks if x[k]['champion_over_min'] <= 1.25 or x[k]['champion_over_min'] <= 1.05 * bk['/'.join(k)]['champion_over_min'])
        worst = max(ks, key=lambda k: x[k]['champion_over_min'])
        off = sum(1 for k in ks if x[k].get('champion_vs_defaults') == 'differs')
        print(name, len(ks), 'geomean %.3f' % g(v), 'goal', goal, 'worst %.3f %s' % (x[worst]['champion_over_min'], '/'.join(worst)), 'off-defaults', off,
              'wall median', sorted(x[k]['wall_secs'] for k in ks)[len(ks)//2])
    print('screen ahead of random %.1f %%' % (100 * (g([rnd[k]['champion_over_min'] / scr[k]['champion_over_min'] for k in ks]) - 1)),
          'better in', sum(1 for k in ks if scr[k]['champion_over_min'] < rnd[k]['champion_over_min']))
    print('screen ahead of hill on these %.1f %%' % (100 * (g([hill[k]['champion_over_min'] / scr[k]['champion_over_min'] for k in ks]) - 1)))
    print('hill ahead of random %.1f %%' % (100 * (g([rnd[k]['champion_over_min'] / hill[k]['champion_over_min'] for k in ks]) - 1)))
# new seeds
print('## new seeds')
ns = {}
for f in glob.glob(''+B+'search_results_raw/2026-12-06-s29/unseen-chips/*/*.json'):
    d = json.load(open(f)); ns.setdefault((d['chip'], d['shape'], d['kernel']), {})[d['strategy']] = d
both = [k for k in ns if len(ns[k]) == 2]
for k in sorted(both, key=lambda k: (int(k[0].split('-')[1]), k[2])):
    s, h = ns[k]['npuopt-screen'], ns[k]['hill']
    print('| %s | %s | %s | %.3f | %.3f | %s | %s |' % (k[0], k[1], k[2], s['champion_over_min'], h['champion_over_min'], s['champion_vs_defaults'], h['champion_vs_defaults']))
if both:
    sv = [ns[k]['npuopt-screen']['champion_over_min'] for k in both]; hv = [ns[k]['hill']['champion_over_min'] for k in both]
    print(len(both), 'screen %.3f hill %.3f' % (g(sv), g(hv)), 'screen ahead %.1f %%' % (100 * (g([h / s for s, h in zip(sv, hv)]) - 1)),
          'better in', sum(1 for s, h in zip(sv, hv) if s < h), 'within 1.25: screen', sum(1 for s in sv if s <= 1.25), 'hill', sum(1 for h in hv if h <= 1.25),
          'worst screen %.3f hill %.3f' % (max(sv), max(hv)))
# new seeds with random
print('## new seeds, three strategies')
tri = [k for k in ns if len(ns[k]) == 3]
if tri:
    for name in ('npuopt-screen', 'hill', 'random'):
        v = [ns[k][name]['champion_over_min'] for k in tri]
        worst = max(tri, key=lambda k: ns[k][name]['champion_over_min'])
        print(name, len(tri), 'geomean %.3f' % g(v), 'within1.25', sum(1 for x in v if x <= 1.25), 'worst %.3f %s' % (ns[worst][name]['champion_over_min'], '/'.join(worst)),
              'off-defaults', sum(1 for k in tri if ns[k][name].get('champion_vs_defaults') == 'differs'))
    for other in ('hill', 'random'):
        print('screen ahead of', other, '%.1f %%' % (100 * (g([ns[k][other]['champion_over_min'] / ns[k]['npuopt-screen']['champion_over_min'] for k in tri]) - 1)),
              'better in', sum(1 for k in tri if ns[k]['npuopt-screen']['champion_over_min'] < ns[k][other]['champion_over_min']))
    for k in sorted(tri, key=lambda k: (int(k[0].split('-')[1]), k[2])):
        print('| %s | %s | %s | %.3f | %.3f | %.3f |' % (k[0], k[1], k[2], ns[k]['npuopt-screen']['champion_over_min'], ns[k]['hill']['champion_over_min'], ns[k]['random']['champion_over_min']))
