"""The `aiperf` command line: everything a person types or reads.

One module per noun: `main` (the entry point), `options` (one-line errors, exit
codes and the options the control commands share), `values` (what each option
accepts), `database` (the --db checks), `format` (FLOPS and durations),
`tables` (readable views of the API's JSON-ready dicts, aiperf.api.views),
`report` (the HTML run report) and the commands: `graph`, `control` (start,
stop, status, scoreboard, models, report), `master` (master serve), `worker`
and `demo`. The library `aiperf` never imports this package.
"""
