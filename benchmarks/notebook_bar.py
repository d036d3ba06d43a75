"""What the notebook progress bar costs: run in a real Jupyter kernel (nbclient), it times
train_val_logger's per-iteration bar check and one redraw of the notebook bar (an IPython
display update sent to the front end).

    .venv/bin/python benchmarks/notebook_bar.py
"""
import json

import nbclient
import nbformat

CELL = r'''
import json, time
from up_trainer.hooks.progress_bars import NotebookBar, in_notebook
assert in_notebook()
bar, n = NotebookBar(), 2000
t0 = time.perf_counter()
for i in range(n):
    bar.draw(i / n, f"{100 * i / n:5.1f}% epoch 1 [{i}/{n}] eta 0:00:10")
draw = (time.perf_counter() - t0) / n
last, checks = 0.0, 0
t0 = time.perf_counter()
for i in range(100000):  # the logger's per-iteration work when no redraw is due
    now = time.perf_counter()
    if now - last >= 0.2:
        last = now
        checks += 1
check = (time.perf_counter() - t0) / 100000
print(json.dumps({"redraw_us": draw * 1e6, "per_iteration_check_us": check * 1e6}))
'''

nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
out = [o for o in nb.cells[0].outputs if o.get("output_type") == "stream"][-1]["text"]
print(json.loads(out.strip().splitlines()[-1]))
