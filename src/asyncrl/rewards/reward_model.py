"""Reward models (``reward.models``): a local Hugging Face sequence-classification model whose one
output logit scores each prompt + completion, as TRL scores a model given in ``reward_funcs``.

TRL's rules, kept so that a reward model scores the same here as there: the text is the prompt
followed by the completion; for a chat row (prompt and completion both messages) the reward model's
own chat template renders the prompt + completion messages. Texts are tokenized without added special
tokens and padded on the right, in batches of ``reward.model_batch_size``; the score is
``logits[:, 0]``, read at the last token that is not padding, so the model's pad token id is set to
its tokenizer's (a tokenizer without a pad token pads with its eos token). A chat row whose reward
model tokenizer has no chat template is scored on the prompt's template-free text instead.

Beyond TRL, for multi-turn episodes and adversarial text: an episode (its conversation, or its text
under ``reward.completion_format=text``) is rendered as messages, tool and environment output under
their own roles (``tool``, ``user``), through the reward model's chat template (a text prompt as a
user message), or without one as ``"\n<role>: <content>"`` lines; and the special-token strings of
every completion message are escaped (asyncrl.core.special_tokens).

A reward model joins the reward functions in :class:`~asyncrl.rewards.scorer.RewardSet`: it is
called like one (``model(completions, context)``) and is loaded once per process (the trainer, each
rollout worker), then kept.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.core.hf_tokenizer import load_tokenizer, tokenizer_problem
from asyncrl.core.loader import ConfigError
from asyncrl.core.special_tokens import escaper_for
from asyncrl.core.user_code import first_line

__all__ = ["RewardModel", "check_config", "check_model_dir", "load_reward_model", "normalize_model_path",
           "reward_models", "save_reward_model", "tokenizer_of"]

_LOADED: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # (path, device, dtype) → (model, tokenizer)


def normalize_model_path(path: str) -> str:
    """``path`` made absolute (against the current directory), so workers and resumed runs find it."""
    return str(Path(path).expanduser().absolute())


def check_config(config, where: str, architectures: list[str] | None = None) -> None:
    """ValueError unless ``config`` is that of a sequence classifier with one output. ``architectures``:
    the model classes, when not the config's (a model object's class, before it is saved)."""
    architectures = list(architectures or getattr(config, "architectures", None) or [])
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise ValueError(f"{where} is not a sequence-classification model (architectures: "
                         f"{', '.join(architectures) or 'none declared'}); a reward model is saved from "
                         "AutoModelForSequenceClassification with num_labels=1")
    if config.num_labels != 1:
        raise ValueError(f"{where} has num_labels={config.num_labels}; a reward model has one output "
                         "(num_labels=1), whose logit is the reward")


def check_model_dir(path: str) -> None:
    """What can be checked without loading the weights: ``path`` is a model directory whose config
    is a one-output sequence classifier, with a tokenizer. ValueError, one line naming ``path``."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{path}: no such directory" if not folder.exists() else f"{path}: not a directory")
    if not (folder / "config.json").is_file():
        raise ValueError(f"{path}: not a Hugging Face model directory (no config.json)")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as err:  # a malformed or unknown config: transformers raises many kinds
        raise ValueError(f"{path}: cannot read its config.json: {first_line(err)}") from None
    check_config(config, path)
    if tokenizer_problem(folder) is not None:
        raise ValueError(f"{path}: no tokenizer in the directory (save the reward model's tokenizer "
                         "beside it: tokenizer.save_pretrained(path))")


def load_reward_model(path: str, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) of the reward model at ``path``, loaded on the first call in this process
    and kept. ValueError, one line naming ``path``, when it does not load."""
    key = (path, device, dtype)
    if key in _LOADED:
        return _LOADED[key]
    import torch
    from transformers import AutoModelForSequenceClassification

    check_model_dir(path)
    try:
        tokenizer = load_tokenizer(path)
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token is None:
                raise ValueError("its tokenizer has neither a pad nor an eos token to pad batches with")
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True,
                                                                   dtype=getattr(torch, dtype))
        # the score is read at the last token that is not padding: the model must know which is padding
        model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
        model = model.to(device).eval()
    except torch.OutOfMemoryError:
        raise  # not the directory's fault
    except Exception as err:  # transformers / safetensors / tokenizers raise many kinds
        raise ValueError(f"cannot load the reward model {path}: {first_line(err)}") from None
    _LOADED[key] = (model, tokenizer)
    return _LOADED[key]


def _conversation(completion) -> list[dict] | None:
    """A completion's messages: a conversational one's, or those an episode's text came from."""
    if isinstance(completion, list):
        return completion
    return getattr(completion, "messages", None) or None


def _plain_conversation(prompt_text: str, messages: list[dict]) -> str:
    """Messages without a chat template: an opening assistant message follows the prompt (whose
    plain rendering ends in its cue), as TRL joins them; every other one on a line of its own under
    its role, as the policy saw them (asyncrl.agents.render.PlainTurns)."""
    text = prompt_text
    for i, message in enumerate(messages):
        role, content = message.get("role", "assistant"), message.get("content") or ""
        text += content if i == 0 and role == "assistant" else f"\n{role}: {content}"
    return text


def _text(tokenizer, prompt, completion, problem) -> str:
    """The text a reward model scores for one row: TRL's (see the module's docstring). What the
    policy wrote or a tool returned has its special-token strings escaped, so that it cannot close
    a turn or open a forged one in the reward model's ids; an episode's tool and environment
    messages keep their roles, so they never read as the assistant's own text."""
    escape = escaper_for(tokenizer)
    messages = _conversation(completion)
    prompt_text = prompt if isinstance(prompt, str) else problem.prompt  # a chat row's template-free text
    if messages is None:
        return prompt_text + escape(completion)
    messages = escape.messages(messages)
    if tokenizer.chat_template:
        prompt_messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt_text}]
        return tokenizer.apply_chat_template(prompt_messages + messages, tokenize=False)
    return _plain_conversation(prompt_text, messages)


@dataclass(frozen=True)
class RewardModel:
    """A reward model as the scorer calls a reward function: one value per completion. ``name``:
    its metric's (``reward/<name>``), the directory's name."""

    path: str
    name: str
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 16
    required: frozenset[str] = frozenset()  # row fields it needs: none beyond prompts and problems

    def __call__(self, completions: list, context: dict) -> list[float]:
        import torch

        model, tokenizer = load_reward_model(self.path, self.device, self.dtype)
        texts = [_text(tokenizer, prompt, completion, problem)
                 for prompt, completion, problem in zip(context["prompts"], completions, context["problems"])]
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            inputs = tokenizer(text=texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                               padding_side="right", add_special_tokens=False).to(model.device)
            with torch.inference_mode():
                scores += model(**inputs).logits[:, 0].float().tolist()
        return scores


def model_dtype(device: str, dtype: str) -> str:
    """``reward.model_dtype``: ``auto`` is bfloat16 on CUDA (a float32 model there takes twice the
    memory, none of it in any budget), float32 elsewhere."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.partition(":")[0] == "cuda" else "float32"


def reward_models(cfg) -> list[RewardModel]:
    """The reward models of a RewardConfig (``models``, ``model_*``), each loaded in this process.
    A ConfigError naming ``reward.models[i]`` (or ``reward.model_device``) when one does not load."""
    import torch

    if cfg.models and torch.device(cfg.model_device).type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("reward.model_device", f"{cfg.model_device!r} requested but torch {torch.__version__} "
                                                 "sees no CUDA device")
    out, dtype = [], model_dtype(cfg.model_device, cfg.model_dtype)
    for i, path in enumerate(cfg.models):
        try:
            load_reward_model(path, cfg.model_device, dtype)
        except ValueError as err:
            raise ConfigError(f"reward.models[{i}]", str(err)) from None
        out.append(RewardModel(path, Path(path).name, cfg.model_device, dtype, cfg.model_batch_size))
    return out


# -- a model object from Python (asyncrl.train(reward_funcs=[model])) → a directory every process loads --


def tokenizer_of(model) -> Any:
    """The tokenizer of a reward model object, as TRL finds it: loaded from where the model was
    loaded from (``model.name_or_path``). ValueError when there is none there."""
    source = getattr(model, "name_or_path", "") or ""
    if not source or os.path.isdir(source) and tokenizer_problem(Path(source)) is not None:
        where = f"at its name_or_path {source!r}" if source else "(it was not loaded from a directory)"
        raise ValueError(f"no tokenizer for the reward model {type(model).__name__} {where}; pass "
                         "(model, tokenizer) instead")
    try:
        return load_tokenizer(source)
    except Exception as err:  # not a directory and not in the local Hugging Face cache
        raise ValueError(f"no tokenizer for the reward model {type(model).__name__} at its name_or_path "
                         f"{source!r} ({first_line(err)}); pass (model, tokenizer) instead") from None


def save_reward_model(model, tokenizer, inputs: Path) -> str:
    """Save ``model`` and ``tokenizer`` once under ``inputs`` as ``reward_model-<content hash>/<name>``
    (``name``: the folder it was loaded from, else its class) and return that directory."""
    check_config(model.config, type(model).__name__, [type(model).__name__])
    source = getattr(model, "name_or_path", "") or ""
    name = re.sub(r"[^\w.-]+", "_", Path(source).name if source else type(model).__name__).strip("._") or "reward_model"
    from transformers.utils import logging as hf_logging

    inputs.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=inputs, prefix=".reward_model-"))
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a script's output shows the run's progress only
    try:
        model.save_pretrained(staging / name)
        tokenizer.save_pretrained(staging / name)
        digest = hashlib.sha1()
        for file in sorted(p for p in (staging / name).rglob("*") if p.is_file()):
            digest.update(file.relative_to(staging).as_posix().encode())
            with open(file, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 24), b""):
                    digest.update(chunk)
        final = inputs / f"reward_model-{digest.hexdigest()[:16]}"
        try:  # a folder appears whole or not at all: renamed into place from its staging copy
            os.replace(staging, final)
        except OSError:  # already there: the same content, saved by an earlier run or by another
            if not (final / name).is_dir():  # rank at the same moment (torchrun ranks all save it)
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if bars:
            hf_logging.enable_progress_bar()
    return str((final / name).absolute())
