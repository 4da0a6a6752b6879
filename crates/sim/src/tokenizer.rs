//! Deterministic built-in tokenizer and chat template.
//!
//! **Token rule.** Text is split on whitespace. Inside each piece, every maximal run of
//! alphanumeric characters (`char::is_alphanumeric`) is one token and every other character
//! (punctuation, symbols, emoji) is one token of its own. So `"Hello, world!"` is 4 tokens
//! (`Hello` `,` `world` `!`) and `"[BENCH_1]"` is 5 (`[` `BENCH` `_` `1` `]`). Whitespace is never
//! a token. Token ids are a hash of the token text in `0..VOCAB_SIZE`.
//!
//! **Chat template** (ChatML-like). Each message contributes
//! `<|im_start|>` + tokens(role) + `\n` + tokens(content) + `<|im_end|>` + `\n`, i.e. a fixed
//! 5 tokens for a one-word role plus its content tokens. With `add_generation_prompt` (the
//! default) the prompt ends with `<|im_start|>` `assistant` `\n` (3 tokens). Content may be a
//! string, `null`, or an array of parts whose `text` fields are tokenized one after another.
//! Completion prompts get no template and no BOS token.
//!
//! The same functions feed `/tokenize`, `usage.prompt_tokens` and the `max_model_len` check, so
//! the three always agree.

/// Number of ordinary token ids; special tokens use ids at or above it.
pub const VOCAB_SIZE: u32 = 151_643;
/// Id of `<|im_start|>`.
pub const IM_START: u32 = 151_644;
/// Id of `<|im_end|>`.
pub const IM_END: u32 = 151_645;
/// Id of the `\n` token the template inserts after the role and after `<|im_end|>`.
pub const NEWLINE: u32 = 198;
/// Prefix-cache block size in tokens.
pub const BLOCK_SIZE: usize = 16;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[inline]
fn fnv_char(h: u64, c: char) -> u64 {
    let mut h = h;
    let mut buf = [0u8; 4];
    for &b in c.encode_utf8(&mut buf).as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

#[inline]
fn id_of(h: u64) -> u32 {
    (h % u64::from(VOCAB_SIZE)) as u32
}

#[inline]
fn mix64(mut x: u64) -> u64 {
    // splitmix64 finaliser
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Receives token ids one by one.
pub trait TokenSink {
    /// Accept the next token id.
    fn push(&mut self, id: u32);
}

/// Tokenize `text` with the rule described in the module docs, feeding ids to `sink`.
pub fn tokenize_into(text: &str, sink: &mut impl TokenSink) {
    let mut word: Option<u64> = None;
    for c in text.chars() {
        if c.is_alphanumeric() {
            word = Some(fnv_char(word.unwrap_or(FNV_OFFSET), c));
        } else {
            if let Some(h) = word.take() {
                sink.push(id_of(h));
            }
            if !c.is_whitespace() {
                sink.push(id_of(fnv_char(FNV_OFFSET, c)));
            }
        }
    }
    if let Some(h) = word {
        sink.push(id_of(h));
    }
}

/// Number of tokens in `text` (no template).
pub fn count_tokens(text: &str) -> u64 {
    let mut c = Counter(0);
    tokenize_into(text, &mut c);
    c.0
}

struct Counter(u64);
impl TokenSink for Counter {
    fn push(&mut self, _id: u32) {
        self.0 += 1;
    }
}

impl TokenSink for Vec<u32> {
    fn push(&mut self, id: u32) {
        Vec::push(self, id);
    }
}

/// One chat message for the template: a role and the text pieces of its content.
#[derive(Debug, Clone, Default)]
pub struct TemplateMessage<'a> {
    /// The role (`system`, `user`, `assistant`, `tool`, ...).
    pub role: &'a str,
    /// Content pieces, tokenized one after another.
    pub content: Vec<&'a str>,
}

/// Apply the chat template (module docs) to `messages`, feeding ids to `sink`.
pub fn apply_chat_template(
    messages: &[TemplateMessage<'_>],
    add_generation_prompt: bool,
    sink: &mut impl TokenSink,
) {
    for m in messages {
        sink.push(IM_START);
        tokenize_into(m.role, sink);
        sink.push(NEWLINE);
        for piece in &m.content {
            tokenize_into(piece, sink);
        }
        sink.push(IM_END);
        sink.push(NEWLINE);
    }
    if add_generation_prompt {
        sink.push(IM_START);
        tokenize_into("assistant", sink);
        sink.push(NEWLINE);
    }
}

/// Prompt tokens of a chat request with these `(role, content)` messages, generation prompt
/// included — the `usage.prompt_tokens` and `/tokenize` count the simulator reports for it.
pub fn chat_prompt_tokens(messages: &[(&str, &str)]) -> u64 {
    let msgs: Vec<TemplateMessage<'_>> = messages
        .iter()
        .map(|&(role, content)| TemplateMessage {
            role,
            content: vec![content],
        })
        .collect();
    let mut c = Counter(0);
    apply_chat_template(&msgs, true, &mut c);
    c.0
}

/// Counts prompt tokens and computes the chained hashes of every whole `BLOCK_SIZE`-token
/// block (the prefix-cache keys), optionally keeping the ids themselves.
#[derive(Debug, Default)]
pub struct PromptSink {
    count: u64,
    state: u64,
    prev_block: u64,
    in_block: usize,
    blocks: Vec<u64>,
    ids: Option<Vec<u32>>,
}

impl PromptSink {
    /// A sink that counts and hashes blocks without keeping ids.
    pub fn new() -> Self {
        PromptSink {
            state: FNV_OFFSET,
            ..Default::default()
        }
    }

    /// A sink that also keeps every id (for `/tokenize`).
    pub fn keeping_ids() -> Self {
        PromptSink {
            ids: Some(Vec::new()),
            ..Self::new()
        }
    }

    /// Total tokens seen.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Consume into (token count, block hashes, ids if kept).
    pub fn finish(self) -> (u64, Vec<u64>, Option<Vec<u32>>) {
        (self.count, self.blocks, self.ids)
    }
}

impl TokenSink for PromptSink {
    #[inline]
    fn push(&mut self, id: u32) {
        self.count += 1;
        if let Some(ids) = &mut self.ids {
            ids.push(id);
        }
        self.state = (self.state ^ u64::from(id)).wrapping_mul(FNV_PRIME);
        self.in_block += 1;
        if self.in_block == BLOCK_SIZE {
            let h = mix64(self.state ^ self.prev_block.rotate_left(17));
            self.blocks.push(h);
            self.prev_block = h;
            self.state = FNV_OFFSET;
            self.in_block = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(text: &str) -> Vec<u32> {
        let mut v = Vec::new();
        tokenize_into(text, &mut v);
        v
    }

    #[test]
    fn token_rule() {
        assert_eq!(count_tokens("Hello, world!"), 4);
        assert_eq!(count_tokens("[BENCH_1]"), 5);
        assert_eq!(count_tokens("  a  b\tc\n"), 3);
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens(" lorem ipsum dolor"), 3);
        assert_eq!(count_tokens("naïve café"), 2);
        assert_eq!(ids("foo bar foo")[0], ids("foo bar foo")[2]);
        assert_ne!(ids("foo")[0], ids("bar")[0]);
        assert!(ids("x y z , .").iter().all(|&i| i < VOCAB_SIZE));
    }

    #[test]
    fn template_overhead() {
        let msgs = [
            TemplateMessage {
                role: "system",
                content: vec!["Be brief."],
            },
            TemplateMessage {
                role: "user",
                content: vec!["Hello there", " friend"],
            },
        ];
        let mut s = PromptSink::new();
        apply_chat_template(&msgs, true, &mut s);
        // (5 + 3) + (5 + 3) + 3
        assert_eq!(s.count(), 19);
        let mut s = PromptSink::new();
        apply_chat_template(&msgs, false, &mut s);
        assert_eq!(s.count(), 16);
        assert_eq!(chat_prompt_tokens(&[("user", "Hello, world!")]), 5 + 4 + 3);
    }

    #[test]
    fn block_hashes_are_prefix_chained() {
        let a = "w ".repeat(40);
        let b = format!("{} z", "w ".repeat(39));
        let mut sa = PromptSink::keeping_ids();
        tokenize_into(&a, &mut sa);
        let mut sb = PromptSink::new();
        tokenize_into(&b, &mut sb);
        let (ca, ba, ia) = sa.finish();
        let (cb, bb, _) = sb.finish();
        assert_eq!((ca, cb), (40, 40));
        assert_eq!(ia.map(|v| v.len()), Some(40));
        assert_eq!(ba.len(), 2);
        assert_eq!(ba, bb); // they differ only in token 40, outside the whole blocks
                            // identical blocks at different positions hash differently (chained)
        assert_ne!(ba[0], ba[1]);
    }
}
