"""Shared by the sessions' summarize.py scripts: bench search result files read as cells with their
exact figure (npuc trace of the champion: exact_over_min in the file, or, for session 30's files
written before the bench traced, its exact.jsonl), the geomean, and the paired ratio of two runs."""
import glob, json, math, os, sys

raw = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(os.path.dirname(raw)))

exact_rows = {}
for line in open(os.path.join(raw, '2026-12-06-s30', 'exact.jsonl')):
    row = json.loads(line)
    if 'exact_over_min' in row:
        exact_rows[os.path.normpath(os.path.join(root, row['file']))] = row['exact_over_min']


def load(pattern):
    """chip/shape/kernel -> exact, measured, template, params, vs_defaults of each result file
    matching `pattern` (relative to search_results_raw/)."""
    cells = {}
    for path in sorted(glob.glob(os.path.join(raw, pattern))):
        j = json.load(open(path))
        exact = j.get('exact_over_min', exact_rows.get(os.path.normpath(path)))
        if exact is None:
            sys.exit(f'{path}: no exact figure')
        cells[f"{j['chip']}/{j['shape']}/{j['kernel']}"] = {'exact': exact, 'measured': j['champion_over_min'],
                                                            'template': j['champion_template'],
                                                            'params': j['champion_params'],
                                                            'vs_defaults': j.get('champion_vs_defaults')}
    return cells


def best_known():
    cells = json.load(open(os.path.join(root, 'tools/bench/search_best_known.json')))['cells']
    return {k: v['exact_over_min'] for k, v in cells.items()}


def geomean(values):
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float('nan')


def paired(a, b, label):
    """Print the geomean ratio a / b over their common cells with its standard error."""
    common = sorted(set(a) & set(b))
    logs = [math.log(a[k]['exact'] / b[k]['exact']) for k in common]
    if not logs:
        return
    mean = sum(logs) / len(logs)
    se = (sum((x - mean) ** 2 for x in logs) / (len(logs) - 1) / len(logs)) ** 0.5 if len(logs) > 1 else float('nan')
    better = sum(x < -1e-9 for x in logs); worse = sum(x > 1e-9 for x in logs)
    print(f'{label}: {len(common)} cells, exact ratio {math.exp(mean):.4f} (se {se:.4f}); better {better}, worse {worse}, '
          f'same {len(common) - better - worse}')
