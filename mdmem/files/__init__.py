"""Which files are memory and how they are read and written: workspace rules, roots that may go
missing, transcripts, the agent's clock and daily log, session files and their block format."""
