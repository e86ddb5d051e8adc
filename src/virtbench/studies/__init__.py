"""The studies as data: study files (studies/NNN.toml, or a user's own) read by studyfile.py into
model.py's Study, the pure scoring of a finding against measured evidence (score.py), the evidence
read from stored runs (evidence.py), the files a run recorded (chosen.py) and the version of the
scoring code it recorded (codeversion.py), the studies' own printed
numbers scored as measurements (ownnumbers.py) and their tables for reports (published.py)."""
