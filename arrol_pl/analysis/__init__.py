"""Analysis layer: reads what runs wrote and measures what a trained policy and head do, apart from training.

:mod:`.history` reads ``history.jsonl`` and reduces it to per-phase medians; :mod:`.runs` reads and pairs the
summaries of a sweep; :mod:`.report` prints a run's summary; :mod:`.sweep` writes a multirun's table;
:mod:`.wallclock` draws accuracy against training time (Fig. 4); :mod:`.significance` judges differences over
seeds; :mod:`.head_probe` probes the quality head offline (Fig. 2); :mod:`.evaluation` runs test-time evaluation
(avg@k, pass@k, voting; Tables 1 and 3). Every number and Markdown table they write goes through
:mod:`.formatting`. The project's own results page is built from these outside the package
(``experiments/results_page``).
"""
