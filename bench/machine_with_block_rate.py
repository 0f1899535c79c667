#!/usr/bin/env python3
"""A machine file's copy whose host Adam rates are its one block's instead of the swept region's.

    bench/machine_with_block_rate.py MACHINE_FILE OUT_FILE

--calibrate on a GPU machine times the host Adam on blocks swept over the run's shard (the
rates a prediction reads) and records the same update on one block timed again and again
(host_adam_block_ms_per_mparam, host_adam_bf16_block_ms_per_mparam: not read).  Which of the
two an engine's update follows in training is what a GPU call has to show (2026-11-30e: at l48
stronghold's update over its 1,007 M ran at the block's rate, zero-infinity's over its shard at
the region's).  This writes OUT_FILE with every rates object (the file's own and each world's)
scaled so that its rate alone is the block's: the fp32 and bf16 rates alone, the rate under
load and the two pairs, each by the same factor (fp32 by the fp32 block's over the fp32 swept
rate; the bf16 rate by the bf16 one's).  The replay tools (busy_from_logs.py,
verify_from_logs.py, replay_predict.py) then predict the same runs from either file.
"""
import json
import sys

SCALED = ("host_adam_ms_per_mparam", "busy_host_adam_ms_per_mparam", "host_adam_h2d_ms_per_mparam",
          "host_adam_d2h_ms_per_mparam")


def to_block(rates):
    """Scale one rates object in place; whether it had the block's rates."""
    block, swept = rates.get("host_adam_block_ms_per_mparam", 0), rates.get("host_adam_ms_per_mparam", 0)
    if block <= 0 or swept <= 0:
        return False
    f = block / swept
    for k in SCALED:
        if k in rates:
            rates[k] *= f
    bf16_block = rates.get("host_adam_bf16_block_ms_per_mparam", 0)
    if bf16_block > 0 and "host_adam_bf16_ms_per_mparam" in rates:
        rates["host_adam_bf16_ms_per_mparam"] = bf16_block
    return True


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    d = json.load(open(argv[1]))
    done = [to_block(d["rates"])] if "rates" in d else []
    done += [to_block(e["rates"]) for e in d.get("collectives", []) if "rates" in e]
    if not any(done):
        sys.stderr.write("%s: no rates object records its one block's host Adam rate\n" % argv[1])
        return 1
    json.dump(d, open(argv[2], "w"), indent=1)
    print("%s: %d of %d rates objects at their one block's host Adam rate" % (argv[2], sum(done), len(done)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
