"""The interruption drill: interrupt a short session on purpose and check the resumed one.

Each scenario runs `belay` as a separate process group in a fresh home, stops the harness at an
exact point of its record (the harness SIGSTOPs itself right after recording the chosen event, see
`belay.harness.attempt.FAULT_ENV`), SIGKILLs the whole group, and resumes with `belay resume`. The
checks read only the record, the artifact store and the ticket service's file.

The same checks run on every executor (`--executor`): `self-hosted` runs the manifest's plan as a
scripted model; a managed executor (`openai-agents`, `anthropic-managed`) runs against its local
stand-in as a person's run does: nothing configured, `belay run` starts the session's stand-in in
the scenario's home, outside the process group the drill kills, and `belay resume` finds it there
(`belay.local.standin_process`). For a managed executor the drill also kills the adapter between
a tool's recorded result and its delivery, and checks with the stand-in's counters that the
provider saw each input and each tool result once, and with the record that the remote session is
the same before and after.
Each kill point is reported with the record's seq range, the deliverables' hashes, the model,
harness and executor versions, and the transition expected and observed.

With `--handover-to B` every scenario that interrupts runs on the executor and resumes on B
(`belay resume --executor B`), and ends with the handover's checks (`handover`).

`manifest` prepares the session for the executor, `run` holds one run's homes, stand-ins and
findings, `scenarios` are the checks, run in order by `run_drill` (a scenario that does not apply is
skipped, named with why; a drill that killed nothing fails, having checked nothing), `children`
drills a coordinator's children (a kill in each, then every session of the objective checked),
`waiting` stops a run that waits on a person or an external condition
or passes its limit (its check fails with what it waited on and the command that answers it; with
`--answer-waits` the waits that decide nothing are answered as a person would), `pages` reads the
briefing just before a resume and just after (the drill's text ends with them side by side),
`change` changes the request (`--change`: an amend while a step runs and after the end, a rejection
after the end) and `change_checks` judges what was redone, reused and delivered, `compare` runs the
task on self-hosted and on a managed executor and measures both (`--compare`),
and `report` is what it returns.
"""

from belay.local.drill.change import Change, run_change_drill
from belay.local.drill.manifest import DEFAULT_MANIFEST, EXECUTORS, drill_executor, handover_refusal
from belay.local.drill.report import DrillReport
from belay.local.drill.scenarios import run_drill

__all__ = [
    "DEFAULT_MANIFEST",
    "EXECUTORS",
    "Change",
    "DrillReport",
    "drill_executor",
    "handover_refusal",
    "run_change_drill",
    "run_drill",
]
