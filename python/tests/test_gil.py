"""A Reader call that waits for the object's loop (another thread's call holds it) lets other
Python threads run: the GIL is released before the loop is taken, for the properties and the
small calls as for the blocking ones. The store is stopped (SIGSTOP) so that a call holds the loop
for its whole timeout."""

import signal
import threading
import time

import _harness as h

import sluice


def main():
    work = h.workdir()
    keys = h.make_keys(work)
    store = h.start_store(work, keys)
    reader = sluice.Reader(store, "policy", holder_id="rollout-0",
                           security=h.security(keys, "rollout-0"))
    h.check(reader.latest() == 0, "the reader reaches the store")
    # The store stops answering: a prefetch waits, and ready() holds the loop for its whole
    # timeout.
    store_process = h._procs[-1]
    store_process.send_signal(signal.SIGSTOP)

    def hold():
        reader.prefetch(1)
        thread = threading.Thread(target=lambda: reader.ready(timeout=3.0))
        thread.start()
        time.sleep(0.3)
        return thread

    holder = hold()
    for name, call in (("current", lambda: reader.current), ("staged", lambda: reader.staged),
                       ("tensors", reader.tensors)):
        ended = []
        waiter = threading.Thread(target=lambda: ended.append((call(), time.monotonic())))
        start = time.monotonic()
        waiter.start()
        # This thread counts while the waiter waits for the loop. Were the GIL held by the waiter,
        # nothing here would run until the holder gave the loop back.
        last, worst, spins = start, 0.0, 0
        while time.monotonic() - start < 0.6:
            now = time.monotonic()
            worst = max(worst, now - last)
            last = now
            spins += 1
        worst = max(worst, time.monotonic() - last)
        waited = not ended or ended[0][1] > start + 0.5
        h.check(waited, f"{name}: the call was still waiting for the loop while this thread ran")
        h.check(worst < 1.0, f"{name}: this thread never stopped for long ({worst:.3f} s) while it waited")
        h.check(spins > 1000, f"{name}: this thread ran ({spins} iterations)")
        holder.join(10)
        waiter.join(10)
        if name != "tensors":  # the next call needs the loop held again
            holder = hold()
    store_process.send_signal(signal.SIGCONT)
    reader.close()


if __name__ == "__main__":
    main()
