"""Where a cgroup enforces a sandbox's processes or memory (a sandbox pod's container), the server
reads the kernel's counters to name the wall a command ran into. The directory here is laid out as
the kernel lays a container's cgroup out (v2, and v1's `memory/`), its counters written as the
kernel writes them."""

from __future__ import annotations

from pathlib import Path

from belay.sandbox import limits

MIB = 1024 * 1024


def walls_for(cgroup: Path, processes: int = 64, memory_mib: int = 128) -> limits.Walls:
    figures = limits.Limits(processes=processes, memory_bytes=memory_mib * MIB, cgroups=(str(cgroup),))
    return limits.Walls(figures, cgroup)


def test_a_v2_cgroup_at_the_figures_names_each_wall_when_its_counter_moves(tmp_path: Path) -> None:
    (tmp_path / "pids.max").write_text("64\n")
    (tmp_path / "pids.events").write_text("max 0\n")
    (tmp_path / "memory.max").write_text(f"{128 * MIB}\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    walls = walls_for(tmp_path)
    assert walls.pids is not None and walls.memory is not None
    before = walls.reading()
    assert walls.counted_trip(before) is None
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
    trip = walls.counted_trip(before)
    assert trip is not None and trip.wall == "memory" and "128 MiB" in trip.message
    (tmp_path / "pids.events").write_text("max 3\n")
    trip = walls.counted_trip(before)
    assert trip is not None and trip.wall == "processes" and "64" in trip.message


def test_a_v1_memory_cgroup_is_read_through_oom_control(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "memory.limit_in_bytes").write_text(f"{128 * MIB}\n")
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    walls = walls_for(tmp_path, processes=0)
    before = walls.reading()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    trip = walls.counted_trip(before)
    assert trip is not None and trip.wall == "memory"


def test_a_cgroup_above_the_figure_is_not_the_wall(tmp_path: Path) -> None:
    # The pod's pids.max is the node's, not the manifest's: the server counts processes itself.
    (tmp_path / "pids.max").write_text("max\n")
    (tmp_path / "pids.events").write_text("max 0\n")
    (tmp_path / "memory.max").write_text(f"{4096 * MIB}\n")
    (tmp_path / "memory.events").write_text("oom_kill 0\n")
    walls = walls_for(tmp_path)
    assert walls.pids is None and walls.memory is None
    assert "RLIMIT" not in walls.describe() and "server's count" in walls.describe()
