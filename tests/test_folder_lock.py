"""Commands started into one folder at the same instant: exactly one takes its lock, whether the folder is free or
holds a dead command's lock (a taker once read the lock empty between its creation and its owner's write, judged it a
dead owner's and took it too)."""

import json
import multiprocessing
import socket

import pytest

from shard_contract import folder_lock

TAKERS, ROUNDS = 3, 200


def take_in_rounds(folders: list[str], barrier, results) -> None:
    """One taker: in each round all takers ask for the folder's lock at once, and a winner holds it until all have
    asked (a loser must be refused by a live owner, not find a released lock)."""
    won = []
    for folder in folders:
        barrier.wait()
        try:
            lock = folder_lock.acquire(folder, "run.lock", "test")
        except folder_lock.FolderLocked:
            lock = None
        barrier.wait()
        folder_lock.release(folder, lock)
        won.append(lock is not None)
    results.put(won)


@pytest.mark.parametrize("dead_owner", [False, True], ids=["free", "dead-owner"])
def test_exactly_one_of_several_takers_starting_together_takes_the_lock(tmp_path, dead_owner):
    folders = [tmp_path / f"round-{index}" for index in range(ROUNDS)]
    for folder in folders:
        folder.mkdir()
        if dead_owner:  # this host, a start time no process of that pid has: its command was killed
            (folder / "run.lock").write_text(json.dumps({"pid": 1, "started": 0.0, "host": socket.gethostname()}))
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(TAKERS, timeout=60), context.Queue()  # a taker that fails stops the others
    paths = [str(folder) for folder in folders]
    takers = [
        context.Process(target=take_in_rounds, args=(paths, barrier, results), daemon=True) for _ in range(TAKERS)
    ]
    for taker in takers:
        taker.start()
    won = [results.get(timeout=120) for _ in takers]
    for taker in takers:
        taker.join(timeout=60)
    winners = [sum(round_won) for round_won in zip(*won)]
    assert [index for index, count in enumerate(winners) if count != 1] == []
    assert [path.name for folder in folders for path in folder.iterdir()] == []  # released, no temporary left
