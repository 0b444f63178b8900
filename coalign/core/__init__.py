"""The ground floor: errors, the console, run folders, ranks, launches, parallel jobs, the machine, JSONL rows
and endpoint options. Imports nothing else of coalign."""
