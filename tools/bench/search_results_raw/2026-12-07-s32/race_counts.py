#!/usr/bin/env python3
"""Race outcomes per cell from the campaign databases of bench search runs:
    race_counts.py OUT.json RESULT.json...
Each result file names its chip's profile in the work folder (WORK/chip-N/chip.profile); the
cell's campaign is WORK/chip-N/shape/kernel/npuopt-screen/campaign.db. Counted: race rows of the
candidate side by verdict (accept, reject, inconclusive, suspect) with their launches, and race
rows that were not raced (the chance gate, too few launches left)."""
import json, os, sqlite3, sys

out, results = sys.argv[1], sys.argv[2:]
rows = {}
for path in results:
    j = json.load(open(path))
    chip, shape, kernel = j['chip'], j['shape'], j['kernel']
    for d in [os.path.dirname(os.path.dirname(j['profile']))]:
        db = os.path.join(d, chip, shape, kernel, 'npuopt-screen', 'campaign.db')
        if os.path.exists(db):
            con = sqlite3.connect(db)
            cell = {'db': db}
            for verdict, count, launches in con.execute(
                    "select verdict, count(*), coalesce(sum(launches), 0) from evaluations where stage = 'race' "
                    "and verdict <> 'champion' group by verdict"):
                cell[verdict] = count
                cell[verdict + '_launches'] = launches
            cell['not_raced'] = con.execute("select count(*) from evaluations where stage = 'race' and reason like 'not raced%'").fetchone()[0]
            rows[f'{chip}/{shape}/{kernel}'] = cell
            break
json.dump(rows, open(out, 'w'), indent=1, sort_keys=True)
