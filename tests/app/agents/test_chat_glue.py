"""The tokens templated between an assistant turn and the next: with `data.apply_chat_template_kwargs` the next
assistant header is the one the prompts got (Qwen3's empty thinking block with enable_thinking false)."""

from support import THINKING_TEMPLATE

from app.agents.chat_glue import ChatGlue


def test_the_next_assistant_header_is_templated_with_the_prompts_variables(smollm2_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    tokenizer.chat_template = THINKING_TEMPLATE
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tool_turn = [{"role": "tool", "content": "42"}]
    header = "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(ChatGlue(tokenizer).after_turn(end, tool_turn)) == header
    glue = ChatGlue(tokenizer, {"enable_thinking": False})
    assert tokenizer.decode(glue.after_turn(end, tool_turn)) == header + "<think>\n\n</think>\n\n"
