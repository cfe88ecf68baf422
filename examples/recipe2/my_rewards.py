"""The reward of README recipe 2, in TRL's form: a list of completions in, one float each out; the
rows' other columns (here ``target``) arrive as keyword arguments of the same length."""


def hit(completions, target, **kwargs):
    """1.0 where the completion's answer, the first word after its "####", is the row's target."""
    scores = []
    for completion, answer in zip(completions, target):
        _, marker, after = completion.partition("####")
        scores.append(float(bool(marker) and after.split()[:1] == [str(answer)]))
    return scores
