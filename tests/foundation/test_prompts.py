import copy

from asyncrl.policy.prompts import encode_prompt


def test_plain_encoding_without_chat_template(tiny_policy):
    _, tok, _ = tiny_policy
    assert encode_prompt(tok, "Q: 1 + 1\nA:") == tok("Q: 1 + 1\nA:")["input_ids"]


def test_chat_template_applied_when_present_and_switchable(tiny_policy):
    _, base, _ = tiny_policy
    chat = copy.deepcopy(base)  # keep the shared fixture's tokenizer untouched
    chat.chat_template = "{% for m in messages %}<bos>User: {{ m['content'] }}\n{% endfor %}Assistant:"
    assert chat.decode(encode_prompt(chat, "hi")).endswith("User: hi\nAssistant:")
    assert encode_prompt(chat, "hi", chat_template=False) == base("hi")["input_ids"]
