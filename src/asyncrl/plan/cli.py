"""``asyncrl plan``'s output: the layout chosen for ``--gpus`` GPUs in full (memory of rank 0's GPU and
of every GPU, time of one step), the other layouts in a line each and the commands that start the
chosen one; or the preset table. Rich tables (Markdown with ``--markdown``). The arithmetic is
:mod:`asyncrl.plan.estimate`'s, the layouts :mod:`asyncrl.plan.layouts`'."""

from __future__ import annotations

import sys

from asyncrl.runtime.validate import load_run_config


def run_plan(args) -> int:
    """``asyncrl plan``: the chosen layout of ``--gpus`` GPUs with its alternatives, or the preset
    table; bad input is one line, exit 2."""
    from asyncrl.plan import estimate as plan
    from asyncrl.objectives.micro_batching import check_micro_batching

    try:
        for flag in ("gpus", "prompt_tokens", "decode_tps", "train_tflops", "bus_gbps", "gpu_gib"):
            if not getattr(args, flag) > 0:
                raise ValueError(f"--{flag.replace('_', '-')}: must be > 0, got {getattr(args, flag)}")
        rates = plan.Rates(decode_tps=args.decode_tps, train_flops=args.train_tflops * 1e12,
                           bus_gbps=args.bus_gbps, gpu_gib=args.gpu_gib)
        cfg = load_run_config(args.config, args.overrides, ignore=("task", "reward"))
        for flag in ("model", "trainer_gpus"):
            if args.table and getattr(args, flag):
                raise ValueError(f"--{flag.replace('_', '-')}: --table plans the four Qwen2.5 presets at 1-64 "
                                 "trainer GPUs; give one or the other")
        shape = plan.PRESETS["0.5B"] if args.table else plan.model_shape(args.model) if args.model \
            else plan.config_model(cfg)
        if args.table:
            inputs = plan.inputs_from_config(cfg, shape, args.gpus, args.prompt_tokens)
            check_micro_batching(cfg.loss, cfg.trainer, ranks=2)
            _plan_table(_cells(inputs, rates), rates, args)
            return 0
        _plan_layouts(shape, rates, args)
    except ValueError as err:  # ConfigError too: one line naming the flag, file or key
        print(f"asyncrl: {err}", file=sys.stderr)
        return 2
    return 0


def _plan_layouts(shape, rates, args) -> None:
    """Every layout of ``--gpus`` GPUs planned; the chosen one in full, then the alternatives and
    the commands that run the chosen one."""
    from asyncrl.plan.estimate import PRESETS
    from asyncrl.plan.layouts import choose, commands, host_note, plan_layouts

    layouts = plan_layouts(args.config, args.overrides, shape, args.gpus, args.prompt_tokens, rates,
                           trainers=args.trainer_gpus)
    chosen = choose(layouts, rates)
    _plan_report(chosen, rates, args)
    _gpu_table(chosen.inputs, rates, args)
    console, _ = _console(args)
    if len(layouts) > 1:
        _layout_table(layouts, chosen, rates, args)
    verdict = "fits every GPU" if chosen.fits(rates) else "NO LAYOUT FITS; the closest"
    console.print(f"layout: {chosen.label} ({verdict}); run it on one machine with:", markup=False)
    preset = any(shape is known for known in PRESETS.values())
    lines = commands(chosen, args.config, args.overrides, None if preset or not args.model else args.model)
    fence = ["```bash", *lines, "```"] if args.markdown else [f"  {line}" for line in lines]
    for line in fence:
        console.print(line, markup=False, soft_wrap=True)
    if note := host_note(chosen):
        console.print(note, markup=False)


def _layout_table(layouts, chosen, rates, args) -> None:
    """One line per layout of the GPUs: its fullest GPU, whether every GPU fits, the step time."""
    from rich.table import Table

    from asyncrl.plan.estimate import GIB

    console, style = _console(args)
    table = Table(title=f"layouts of {args.gpus} GPUs, an estimate (▶ = chosen)", box=style)
    for name, justify in (("layout", "left"), ("fullest GPU GiB", "right"), ("fits", "left"), ("step s", "right")):
        table.add_column(name, justify=justify)
    for layout in layouts:
        mark = "▶ " if layout is chosen else ""
        if layout.refused:
            table.add_row(mark + layout.label, "—", f"refused: {layout.refused}", "—")
            continue
        fits = "yes" if layout.fits(rates) else "NO"
        table.add_row(mark + layout.label, f"{layout.largest / GIB:.2f}", fits, f"{layout.time.step:.2f}")
    _print_table(console, table, args.markdown)


def _cells(base, rates) -> dict[str, dict[int, tuple]]:
    """{size: {gpus: (Memory, StepTime) or the reason the world size is refused}} for the presets."""
    from dataclasses import replace

    from asyncrl.plan import estimate as plan

    cells: dict[str, dict[int, tuple]] = {}
    for size in plan.TABLE_SIZES:
        cells[size] = {}
        for n in plan.TABLE_GPUS:
            try:
                inputs = replace(base, model=plan.PRESETS[size], gpus=n)
                cells[size][n] = (plan.memory(inputs, rates), plan.step_time(inputs, rates))
            except ValueError as err:
                cells[size][n] = (str(err),)
    return cells


def _console(args):
    from rich import box
    from rich.console import Console

    # not a terminal (a pipe, a test): wide enough that no table wraps
    console = Console() if sys.stdout.isatty() and not args.markdown else Console(width=200, highlight=False)
    return console, (box.MARKDOWN if args.markdown else box.SIMPLE_HEAD)


def _print_table(console, table, markdown: bool) -> None:
    """A rich table; in Markdown its title is a bold line of its own."""
    if markdown and table.title:
        console.print(f"**{table.title}**\n", markup=False)
        table.title = None
    console.print(table)


def _plan_report(layout, rates, args) -> None:
    from rich.table import Table

    from asyncrl.plan.estimate import GIB, memory, step_time

    inputs = layout.inputs
    mem, time = memory(inputs, rates), step_time(inputs, rates)
    console, style = _console(args)
    shape = inputs.model
    precision = f"{inputs.weight_dtype} weights" + (", bf16 autocast" if inputs.autocast else "")
    console.print(f"{shape.name}: {shape.params / 1e9:.3f}B parameters (hidden {shape.hidden}, {shape.layers} layers, "
                  f"{shape.heads}/{shape.kv_heads} heads, MLP {shape.intermediate}, vocabulary {shape.vocab}"
                  f"{', tied' if shape.tied else ''}); {args.gpus} GPU(s): {layout.label}, config {args.config}")
    console.print(f"step: {inputs.batch_rows} sequences of {inputs.prompt_tokens} + {inputs.new_tokens} positions, "
                  f"{inputs.minibatches} updates; one forward pass on rank 0: {mem.rows} rows; {precision}; "
                  f"activation checkpointing {'on' if inputs.grad_ckpt else 'off'}; {inputs.mode}, {inputs.engine}")
    if inputs.lora is not None:
        from asyncrl.plan.lora import ADAPTER_BYTES, adapter_params

        console.print(f"LoRA rank {inputs.lora.rank} on {', '.join(inputs.lora.modules)}: "
                      f"{adapter_params(shape, inputs.lora):,} adapter parameters train (float{8 * ADAPTER_BYTES}); "
                      f"the {shape.params:,} base weights are frozen in {inputs.weight_dtype}")
    table = Table(title=f"memory of one GPU (rank 0 of {inputs.gpus}), an estimate", box=style)
    for name, justify in (("item", "left"), ("GiB", "right"), ("what", "left")):
        table.add_column(name, justify=justify)
    for label, (value, note) in mem.lines.items():
        table.add_row(label, f"{value / GIB:.2f}", note)
    table.add_row("trainer peak", f"{mem.peak / GIB:.2f}", f"held throughout + the largest moment: {mem.peak_moment}")
    fits = "fits" if mem.total <= rates.gpu_gib * GIB else "DOES NOT FIT"
    table.add_row("GPU total", f"{mem.total / GIB:.2f}", f"trainer peak + channel + rollout: {fits} in {rates.gpu_gib:g} GiB")
    _print_table(console, table, args.markdown)
    steps = Table(title="time of one step, an estimate", box=style)
    for name, justify in (("part", "left"), ("s", "right"), ("how", "left")):
        steps.add_column(name, justify=justify)
    engines = f"({time.rollout_gpus} rollout GPUs × {rates.decode_tps:g}" if time.rollout_gpus > 1 \
        else f"({rates.decode_tps:g}"
    steps.add_row("generation", f"{time.generation:.2f}", f"{inputs.batch_rows * inputs.new_tokens} tokens / "
                  f"{engines} tokens/s)")
    steps.add_row("training", f"{time.training:.2f}", f"{time.flop_factor}·P·tokens / ({inputs.gpus} × "
                  f"{rates.train_flops / 1e12:.1f} TFLOP/s)")
    steps.add_row("weight broadcast", f"{time.broadcast:.3f}", f"{time.broadcast_bytes / 1e9:.2f} GB / "
                  f"{rates.bus_gbps:g} GB/s")
    how = "max(generation, training + broadcast)" if inputs.mode == "async" else "generation + training + broadcast"
    steps.add_row("step", f"{time.step:.2f}", f"{inputs.mode}: {how}")
    _print_table(console, steps, args.markdown)


def _gpu_table(inputs, rates, args) -> None:
    """One line per GPU role of the job (asyncrl.plan.gpus): what it holds, its total, whether it fits."""
    from rich.table import Table

    from asyncrl.plan.estimate import GIB
    from asyncrl.plan.gpus import job_gpus

    console, style = _console(args)
    table = Table(title=f"every GPU of the job, an estimate ({rates.gpu_gib:g} GiB each)", box=style)
    for name, justify in (("GPU", "left"), ("count", "right"), ("GiB", "right"), ("fits", "left"), ("holds", "left")):
        table.add_column(name, justify=justify)
    for role in job_gpus(inputs, rates):
        holds = "; ".join(f"{label} {value / GIB:.2f}" for label, (value, _) in role.items.items())
        fits = "yes" if role.fits(rates) else f"NO: {role.refused}" if role.refused else "NO"
        table.add_row(role.role, str(role.count), f"{role.total / GIB:.2f}", fits, holds)
    _print_table(console, table, args.markdown)


def _plan_table(cells, rates, args) -> None:
    from rich.table import Table

    from asyncrl.plan.estimate import PRESETS

    console, style = _console(args)
    gpus = list(next(iter(cells.values())))
    memory = Table(title=f"GiB on rank 0's GPU (trainer peak + generation); ✗ = over {rates.gpu_gib:g} GiB", box=style)
    times = Table(title="seconds per step (in brackets: training + weight broadcast alone)", box=style)
    for table in (memory, times):
        table.add_column("model")
        for n in gpus:
            table.add_column(f"{n} GPU{'s' if n > 1 else ''}", justify="right")
    for size, row in cells.items():
        label = f"{size} ({PRESETS[size].params / 1e9:.2f}B)"
        memory.add_row(label, *[_gib_cell(cell, rates) for cell in row.values()])
        times.add_row(label, *[f"{cell[1].step:.1f} ({cell[1].training + cell[1].broadcast:.1f})" if len(cell) > 1
                               else "—" for cell in row.values()])
    _print_table(console, memory, args.markdown)
    _print_table(console, times, args.markdown)
    refused = {cell[0] for row in cells.values() for cell in row.values() if len(cell) == 1}
    for reason in sorted(refused):
        console.print(f"—: {reason}")


def _gib_cell(cell, rates) -> str:
    from asyncrl.plan.estimate import GIB

    if len(cell) == 1:
        return "—"
    total = cell[0].total / GIB
    return f"{total:.1f}" + (" ✗" if total > rates.gpu_gib else "")
