#!/usr/bin/env python3
"""Rebuild tools/bench/search_best_known.json on exact figures.

The best-known file was kept from re-measured champions (median of 7 launches, each with the
chip's noise and its time-of-day drift), so a cell's best could come from a lucky hour: up to a
few per cent low, which makes "within 1.05x of the best known" harder than it is. This scores
every recorded design exactly (tools/bench/exact_champions.py: its source through `npuc trace` on
its chip, no noise, no drift): the file's own entries and the champions of every result file
given, and keeps per cell the design with the lowest exact cycles, with exact_over_min and
champion_exact_cycles beside its re-measured champion_over_min.

    tools/bench/rebuild_best_known.py BUILD_DIR BEST_KNOWN.json RESULT.json... > NEW.json

An entry or result whose chip the generator now draws differently (another profile SHA-256, or
another sustained bandwidth in the result) is left out of the scoring; the file's own entries for
such chips are kept as they were. A summary goes to stderr.
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exact_champions as ec  # noqa: E402


def profile_value(chip, key):
    for line in open(ec.chip_profile(chip)):
        line = line.split('#')[0]
        if '=' in line and line.split('=')[0].strip() == key:
            return float(line.split('=')[1])
    return None


def main():
    ec.setup(sys.argv[1])
    best_file = json.load(open(sys.argv[2]))
    entries = best_file['cells']
    results = []
    for path in sys.argv[3:]:
        try:
            j = json.load(open(path))
        except Exception:
            continue
        if isinstance(j, dict) and j.get('chip', '').startswith('chip-') and j.get('champion_template') and j.get('true_min_cycles'):
            results.append((path, j))
    shapes = {f"{j['chip']}/{j['shape']}/{j['kernel']}": j['shape_values'] for _, j in results}
    sha = {chip: ec.profile_sha256(chip) for chip in {key.split('/')[0] for key in list(entries) + list(shapes)}}
    candidates = {}  # cell -> list of entries (with exact figures)
    stale = skipped = failed = 0

    jobs = []
    for key, entry in entries.items():
        chip = key.split('/')[0]
        if entry.get('profile_sha256') != sha[chip] or key not in shapes:
            stale += 1
            continue
        jobs.append((key, dict(entry), chip, shapes[key], entry['template'], entry['params']))
    for path, j in results:
        chip = j['chip']
        sustained = profile_value(chip, 'hbm_sustained_bytes_per_cycle')
        if sustained is None or abs(sustained - j.get('true_sustained_bytes_per_cycle', -1)) > 1e-9:
            skipped += 1
            continue
        run = os.path.dirname(os.path.relpath(path, os.path.join(ec.root, 'tools/bench/search_results_raw')))
        entry = {'champion_over_min': j.get('champion_over_min'), 'champion_cycles': j.get('champion_cycles'),
                 'true_min_cycles': j['true_min_cycles'], 'template': j['champion_template'],
                 'params': j['champion_params'], 'strategy': j['strategy'],
                 'device_run_budget': j.get('device_run_budget'), 'profile_sha256': sha[chip],
                 'run': f"tools/bench/search_results_raw/{run}"}
        jobs.append((f"{chip}/{j['shape']}/{j['kernel']}", entry, chip, j['shape_values'], j['champion_template'],
                     j['champion_params']))

    from concurrent.futures import ThreadPoolExecutor

    def work(job):
        key, entry, chip, shape_values, template, params = job
        dev, version, error = ec.score(chip, shape_values, key.split('/')[2], template, params, abs(hash(json.dumps(entry, sort_keys=True))))
        return key, entry, dev, version, error

    with ThreadPoolExecutor(2) as pool:
        for key, entry, dev, version, error in pool.map(work, jobs):
            if error:
                failed += 1
                print(f"cannot score {key} ({entry.get('run')}): {error}", file=sys.stderr)
                continue
            entry['champion_exact_cycles'] = dev
            entry['exact_over_min'] = dev / entry['true_min_cycles']
            if version != 'working tree':
                entry['template_commit'] = version
            else:
                entry.pop('template_commit', None)
            candidates.setdefault(key, []).append(entry)

    out, moved = {}, 0
    for key in sorted(set(entries) | set(candidates)):
        if key in candidates:
            best = min(candidates[key], key=lambda e: e['exact_over_min'])
            old = entries.get(key)
            if old and old.get('profile_sha256') == best['profile_sha256'] and (old['template'], old['params']) != (best['template'], best['params']):
                moved += 1
            out[key] = best
        else:
            out[key] = entries[key]
    print(f"{len(out)} cells; {len(jobs) - failed} designs scored exactly, {failed} could not be; {stale} entries for "
          f"chips drawn differently now (kept as they were), {skipped} results for such chips left out; "
          f"{moved} cells have another best design than the re-measured file had", file=sys.stderr)
    best_file['cells'] = out
    best_file['what'] = ('per chip/shape/kernel, the best design of any strategy in the recorded `bench search` runs, '
                         'scored exactly (exact_over_min: its source through npuc trace on the chip, no launch noise, '
                         'no time-of-day drift; tools/bench/rebuild_best_known.py), with its re-measured champion_over_min')
    print(json.dumps(best_file, indent=2))


if __name__ == '__main__':
    main()
