"""The chaos soak: one learner, many clients on every plane (shared memory, the data channel's socket, ZeroMQ),
faults that combine, every row checked.

``python -m tests.soak --seconds 3600 --seed 123`` (``tests/test_soak.py`` runs it in CI for 60 s on a fixed
and on a random seed). It prints the seed first and a summary last (faults by kind, calls by kind, rows
checked, loss reports, worst latency per call kind, the learner's memory growth), and exits 0 or 1; a
failure prints the seed, how to replay it, what failed and the event log's last lines. The parts, one
module each:

* ``schedule``: the run's parameters and its fault schedule, drawn from the seed;
* ``supervisor``: the client processes (started and ended by pid) and the fault injector thread;
* ``learner``: the RemoteVectorEnv driven through every kind of call, each call timed and sometimes
  interrupted, every result handed to the checker;
* ``checker``: pure; what each slot may show next, and whether each loss is reported exactly once;
* ``events``: the timestamped event log a failure prints;
* ``watcher``: an operator's ``gym-remote status --watch``: the learner's status asked for about once a second
  and each report checked (answered within 30 s, the slots and their clients, counts that never go down);
* ``run``: setting up, the checks at the end (leftover processes, socket names, files, memory), the summary.

What it decides, and why:

* **The learner**: ``RemoteVectorEnv(num_envs=8)`` in server form on an ``ipc://`` path in the soak's own
  directory or on loopback tcp (from the seed), ``liveness_timeout=2`` (faults resolve within seconds),
  ``timeout=connect_timeout=30`` (far above every latency bound: a library timeout is always a failure),
  the autoreset mode (NextStep or SameStep) and ``batch_size`` (1 to 6) from the seed, and a quarter of the
  seeds with observations of 256 KiB (large messages).
* **The env** (``tests/envs/soak.py``) shows in its observation the client's pid, its index in the client,
  its episode, the step, a checksum of the episode's actions, where the episode ends (drawn from pid, index
  and episode) and a tag ``set_attr`` sets; so every row is predicted exactly from the actions sent.
* **Faults** (weights in ``schedule.KINDS``, one every 0.3-2.5 s): SIGKILL and SIGTERM (replaced at once),
  SIGSTOP for 0.05-0.3 x liveness (must be ridden out: no loss), SIGSTOP for 2.5-3.5 x liveness (must be lost,
  then the client rejoins as a new session; replaced meanwhile), 2-3 members frozen so at once (found
  together, not one after another), extra clients while every slot is served (they wait in line), and 3 %
  of the learner's calls interrupted (SIGALRM raising KeyboardInterrupt 0.2 ms to 1.5 s into the call).
  The supervisor also SIGTERMs the longest waiting client while more than 5 envs wait in line.
* **Losses**: resets happen only at quiet points (the injector paused, every owed loss report collected
  first), so no reset drops a report the checker waits for.
* **Latency**: a call may last until every fault that came before its end is resolved, plus 2 s of
  slack (:data:`learner.SLACK`); a kill or SIGTERM is resolved once a replacement can have joined (4 s), a
  long freeze once the loss is found (liveness + 1.5 s) and a replacement joined (4 s), a brief freeze
  when it ends.
* **Memory**: the learner's RSS, measured at quiet points after a warm-up (a quarter of the run, at most
  20 s), after the C allocator gave back its free memory (``malloc_trim``), may grow by 16 MiB plus 16 MiB
  per hour of run (``run.RSS_GROWTH_BASE``, ``RSS_GROWTH_PER_HOUR``).
"""
