//! Fast path of [`decode`](crate::decode): a strict, allocation-free (unless a string has escapes)
//! reader for ordinary streamed chunks.
//!
//! It fills the same intermediate [`Top`] as the serde visitors in `decode.rs`, so both paths
//! build the result with the same code. It accepts only input that is valid JSON (RFC 8259:
//! string escapes, control characters, number grammar, literals, no trailing characters) and
//! gives up — returning `None`, so that the serde path decides — on anything it does not handle
//! exactly like the serde path: escaped keys, lone surrogates, numbers other than plain
//! non-negative integers where a count is read, deep nesting, unexpected value types, and the
//! rare top-level keys (`error`, `message`, `code`, `type`, `error_type`, `timings`). The unit
//! tests below check that the two paths agree on the fixtures and on randomly mutated payloads.

use std::borrow::Cow;

use crate::decode::{Choice, Delta, TgiDetails, TgiToken, Top, Usage};

/// Deepest container nesting the fast path handles (serde_json's limit is 128).
const MAX_DEPTH: u32 = 32;

/// Parse a trimmed payload into `top` (which must be `Top::default()`); `None` means "use the
/// serde path" (`top` is then partly filled and must be discarded).
pub(crate) fn parse<'a>(s: &'a str, top: &mut Top<'a>) -> Option<()> {
    let mut p = Reader {
        s,
        b: s.as_bytes(),
        i: 0,
    };
    p.ws();
    p.top(top)?;
    p.ws();
    (p.i == p.b.len()).then_some(())
}

struct Reader<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

/// Position of the first `"` or backslash in `rest`, provided no control character (< 0x20)
/// comes before it; `None` if there is none or a control character comes first.
///
/// Tests 8 bytes at a time (SWAR): for each of the three conditions, `(x - 0x01..01) & !x &
/// 0x80..80` flags the bytes where `x` is zero (resp. below 0x20). Borrows can only flag bytes
/// *above* a truly flagged byte, so the lowest flag is always exact.
#[inline]
fn string_end(rest: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::MAX / 255; // 0x0101..01
    const HIGH: u64 = ONES << 7; // 0x8080..80
    let mut i = 0;
    for block in rest.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(block);
        let w = u64::from_le_bytes(w);
        let ctrl = w.wrapping_sub(ONES * 0x20) & !w;
        let q = w ^ (ONES * u64::from(b'"'));
        let q = q.wrapping_sub(ONES) & !q;
        let bs = w ^ (ONES * u64::from(b'\\'));
        let bs = bs.wrapping_sub(ONES) & !bs;
        let m = (ctrl | q | bs) & HIGH;
        if m != 0 {
            let k = i + (m.trailing_zeros() / 8) as usize;
            return (*rest.get(k)? >= 0x20).then_some(k);
        }
        i += 8;
    }
    for (k, &c) in rest.get(i..)?.iter().enumerate() {
        if STOP[usize::from(c)] {
            return (c >= 0x20).then_some(i + k);
        }
    }
    None
}

/// Bytes that end the unescaped run of a JSON string: `"`, `\\` and control characters.
static STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

impl<'a> Reader<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.i += 1;
        }
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn lit<const N: usize>(&mut self, word: &[u8; N]) -> Option<()> {
        if self.b.get(self.i..self.i + N)? == word {
            self.i += N;
            Some(())
        } else {
            None
        }
    }

    /// Number of ASCII digits consumed.
    #[inline]
    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        let mut v = 0u32;
        for &c in h {
            v = v * 16 + (c as char).to_digit(16)?;
        }
        self.i += 4;
        Some(v)
    }

    /// Members of an object at `{`. `f` gets each key (escape-free, else give up) with the
    /// position at its value and must consume the value.
    fn object(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let start = self.i;
            let n = string_end(self.b.get(start..)?)?;
            if self.peek_at(start + n)? != b'"' {
                return None; // escaped key
            }
            let key = self.s.get(start..start + n)?;
            self.i = start + n + 1;
            self.ws();
            self.eat(b':')?;
            self.ws();
            f(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    #[inline]
    fn peek_at(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }

    /// Elements of an array at `[`; `f` gets the element index and must consume the element.
    fn array(&mut self, mut f: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        let mut idx = 0;
        loop {
            f(self, idx)?;
            idx += 1;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string value (borrowed when it has no escapes).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        let n = string_end(self.b.get(start..)?)?;
        if self.peek_at(start + n)? == b'"' {
            self.i = start + n + 1;
            return Some(Cow::Borrowed(self.s.get(start..start + n)?));
        }
        let mut out = String::with_capacity(n + 16);
        out.push_str(self.s.get(start..start + n)?);
        self.i = start + n;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(Cow::Owned(out));
                }
                _ => {
                    self.i += 1; // the backslash
                    self.unescape(&mut out)?;
                }
            }
            let seg = self.i;
            let n = string_end(self.b.get(seg..)?)?;
            out.push_str(self.s.get(seg..seg + n)?);
            self.i = seg + n;
        }
    }

    fn unescape(&mut self, out: &mut String) -> Option<()> {
        let c = self.peek()?;
        self.i += 1;
        let ch = match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                match hi {
                    0xD800..=0xDBFF => {
                        if self.b.get(self.i..self.i + 2)? != b"\\u" {
                            return None;
                        }
                        self.i += 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                    }
                    0xDC00..=0xDFFF => return None,
                    _ => char::from_u32(hi)?,
                }
            }
            _ => return None,
        };
        out.push(ch);
        Some(())
    }

    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let n = string_end(self.b.get(self.i..)?)?;
            self.i += n;
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                _ => {
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            self.i += 1;
                            self.hex4()?;
                        }
                        _ => return None,
                    }
                }
            }
        }
    }

    fn skip_number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    /// Skip any JSON value whose containers would sit at nesting level `depth`.
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => {
                if depth > MAX_DEPTH {
                    return None;
                }
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.peek()? {
                        b',' => {
                            self.i += 1;
                            self.ws();
                        }
                        b'}' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                if depth > MAX_DEPTH {
                    return None;
                }
                self.array(|p, _| p.skip_value(depth + 1))
            }
            b't' => self.lit(b"true"),
            b'f' => self.lit(b"false"),
            b'n' => self.lit(b"null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// `null` or a string.
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        match self.peek()? {
            b'n' => self.lit(b"null").map(|_| None),
            b'"' => self.string().map(Some),
            _ => None,
        }
    }

    /// `null` or a plain non-negative integer of at most 19 digits (anything else: give up).
    fn count(&mut self) -> Option<Option<u64>> {
        match self.peek()? {
            b'n' => self.lit(b"null").map(|_| None),
            b'0'..=b'9' => {
                let start = self.i;
                let n = self.digits();
                if n > 19 || (n > 1 && self.peek_at(start)? == b'0') {
                    return None;
                }
                if let Some(b'.' | b'e' | b'E') = self.peek() {
                    return None;
                }
                let mut v = 0u64;
                for &d in self.b.get(start..self.i)? {
                    v = v * 10 + u64::from(d - b'0');
                }
                Some(Some(v))
            }
            _ => None,
        }
    }

    /// `null` or `{ "<field>": count, ... }`.
    fn opt_detail(&mut self, field: &str, depth: u32) -> Option<Option<u64>> {
        match self.peek()? {
            b'n' => self.lit(b"null").map(|_| None),
            b'{' => {
                let mut v = None;
                self.object(|p, k| {
                    if k == field {
                        v = p.count()?;
                        Some(())
                    } else {
                        p.skip_value(depth + 1)
                    }
                })?;
                Some(v)
            }
            _ => None,
        }
    }

    fn top(&mut self, t: &mut Top<'a>) -> Option<()> {
        self.object(|p, key| {
            match key {
                "choices" => p.choices(&mut t.choice)?,
                "usage" => p.opt_usage(&mut t.usage)?,
                "id" => t.id = p.opt_string()?,
                "object" => t.object = p.opt_string()?,
                "token" => t.token = p.opt_token()?,
                "details" => t.details = p.opt_details()?,
                "generated_text" => p.skip_value(2)?,
                "timings" | "error" | "message" | "code" | "type" | "error_type" => return None,
                _ => return p.skip_value(2),
            }
            t.recognised = true;
            Some(())
        })
    }

    /// `null` or an array whose first element (an object) is kept in `out`.
    fn choices(&mut self, out: &mut Option<Choice<'a>>) -> Option<()> {
        *out = None;
        match self.peek()? {
            b'n' => self.lit(b"null"),
            b'[' => self.array(|p, idx| {
                if idx > 0 {
                    return p.skip_value(3);
                }
                if p.peek()? != b'{' {
                    return None;
                }
                p.choice(out.insert(Choice::default()))
            }),
            _ => None,
        }
    }

    fn choice(&mut self, c: &mut Choice<'a>) -> Option<()> {
        self.object(|p, key| {
            match key {
                "delta" => {
                    c.delta = None;
                    match p.peek()? {
                        b'n' => p.lit(b"null")?,
                        b'{' => p.delta(c.delta.insert(Delta::default()))?,
                        _ => return None,
                    }
                }
                "text" => c.text = p.opt_string()?,
                "finish_reason" => c.finish_reason = p.opt_string()?,
                _ => p.skip_value(4)?,
            }
            Some(())
        })
    }

    fn delta(&mut self, d: &mut Delta<'a>) -> Option<()> {
        self.object(|p, key| {
            match key {
                "content" => d.content = p.opt_string()?,
                "reasoning_content" => d.reasoning_content = p.opt_string()?,
                "reasoning" => d.reasoning = p.opt_string()?,
                "tool_calls" => {
                    d.tool_calls = match p.peek()? {
                        b'n' => p.lit(b"null").map(|_| false)?,
                        b'[' | b'{' => {
                            let open = p.i;
                            p.i += 1;
                            p.ws();
                            let non_empty = !matches!(p.peek()?, b']' | b'}');
                            p.i = open;
                            p.skip_value(5)?;
                            non_empty
                        }
                        _ => return None,
                    }
                }
                "role" => {
                    d.role = match p.peek()? {
                        b'n' => p.lit(b"null").map(|_| false)?,
                        _ => {
                            p.skip_value(5)?;
                            true
                        }
                    }
                }
                _ => p.skip_value(5)?,
            }
            Some(())
        })
    }

    fn opt_usage(&mut self, out: &mut Option<Usage>) -> Option<()> {
        *out = None;
        match self.peek()? {
            b'n' => self.lit(b"null"),
            b'{' => {
                let u = out.insert(Usage::default());
                let mut flat_reasoning = None;
                self.object(|p, key| {
                    match key {
                        "prompt_tokens" => u.prompt_tokens = p.count()?,
                        "completion_tokens" => u.completion_tokens = p.count()?,
                        "prompt_tokens_details" => {
                            u.cached_tokens = p.opt_detail("cached_tokens", 3)?
                        }
                        "completion_tokens_details" => {
                            u.reasoning_tokens = p.opt_detail("reasoning_tokens", 3)?
                        }
                        "reasoning_tokens" => flat_reasoning = p.count()?,
                        _ => p.skip_value(3)?,
                    }
                    Some(())
                })?;
                u.reasoning_tokens = u.reasoning_tokens.or(flat_reasoning);
                Some(())
            }
            _ => None,
        }
    }

    fn opt_token(&mut self) -> Option<Option<TgiToken<'a>>> {
        match self.peek()? {
            b'n' => self.lit(b"null").map(|_| None),
            b'{' => {
                let mut t = TgiToken::default();
                self.object(|p, key| {
                    match key {
                        "text" => t.text = p.opt_string()?,
                        "special" => {
                            t.special = match p.peek()? {
                                b't' => p.lit(b"true").map(|_| true)?,
                                b'f' | b'n' => {
                                    p.skip_value(3)?;
                                    false
                                }
                                _ => return None,
                            }
                        }
                        _ => p.skip_value(3)?,
                    }
                    Some(())
                })?;
                Some(Some(t))
            }
            _ => None,
        }
    }

    fn opt_details(&mut self) -> Option<Option<TgiDetails<'a>>> {
        match self.peek()? {
            b'n' => self.lit(b"null").map(|_| None),
            b'{' => {
                let mut d = TgiDetails::default();
                self.object(|p, key| {
                    match key {
                        "finish_reason" => d.finish_reason = p.opt_string()?,
                        "generated_tokens" => d.generated_tokens = p.count()?,
                        _ => p.skip_value(3)?,
                    }
                    Some(())
                })?;
                Some(Some(d))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_serde;
    use crate::{Decoded, SseFramer};

    fn fast(s: &str) -> Option<Decoded<'_>> {
        let mut top = Top::default();
        parse(s, &mut top)?;
        Some(top.into_decoded())
    }

    /// Every data payload of every SSE fixture.
    fn fixture_payloads() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/engines");
        let mut out = Vec::new();
        for sub in ["sse", "local-captures", "derived"] {
            let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
                continue;
            };
            let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for p in paths {
                if p.extension().and_then(|e| e.to_str()) != Some("sse") {
                    continue;
                }
                let bytes = std::fs::read(&p).unwrap_or_default();
                let mut f = SseFramer::new();
                let at = std::time::Instant::now();
                f.push(&bytes, at, |e| out.push(e.data.to_owned()));
                f.finish(at, |e| out.push(e.data.to_owned()));
            }
        }
        assert!(out.len() >= 140, "fixtures not found");
        out
    }

    #[test]
    fn string_end_matches_a_naive_scan() {
        fn naive(rest: &[u8]) -> Option<usize> {
            let k = rest
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            (rest[k] >= 0x20).then_some(k)
        }
        let alphabet = [
            b'a', b'"', b'\\', 0x00, 0x1F, 0x20, 0x21, 0x7F, 0x80, 0xA0, 0xE6, 0xFF, b'\n',
        ];
        let mut rng = Rng(7);
        for _ in 0..50_000 {
            let len = rng.below(40);
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.below(4) == 0 {
                        alphabet[rng.below(alphabet.len())]
                    } else {
                        b'a' + rng.below(26) as u8
                    }
                })
                .collect();
            assert_eq!(string_end(&v), naive(&v), "{v:?}");
        }
    }

    #[test]
    fn fast_path_agrees_with_serde_on_fixtures() {
        let mut fast_hits = 0;
        let mut considered = 0;
        let payloads = fixture_payloads();
        for p in &payloads {
            let p = p.trim_ascii();
            if p == "[DONE]" {
                continue;
            }
            considered += 1;
            let reference = decode_serde(p);
            if let Some(d) = fast(p) {
                fast_hits += 1;
                assert_eq!(d, reference, "{p}");
            }
        }
        // every ordinary chunk takes the fast path; only error / timings payloads fall back
        let fallbacks = considered - fast_hits;
        assert!(
            fallbacks <= 12,
            "fast path handled only {fast_hits} of {considered} payloads (besides [DONE])"
        );
    }

    #[test]
    fn fast_path_handles_escapes_like_serde() {
        for s in [
            r#"{"choices":[{"delta":{"content":"a\nb\"c\\d\/e\b\f\r\t"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\u6211\u662f \ud83d\ude00 \u00e9"}}]}"#,
            r#"{"choices":[{"text":"x","logprobs":{"tokens":["\u0041"],"top":[{"\u0062":-1.5e-3}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"a\": [1, 2.5, -3e+2, true, false, null]}"}}]}}]}"#,
            r#" { "id" : "x" , "choices" : [ { "delta" : { "content" : "y" } } , { "delta" : null } ] } "#,
            r#"{"choices":[],"usage":{"prompt_tokens":0,"completion_tokens":9999999999999999999}}"#,
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"role":null,"content":""}}]}"#,
            r#"{"choices":[{"delta":{"role":{"x":[1]}}}]}"#,
        ] {
            let f = fast(s).unwrap_or_else(|| panic!("fast path gave up on {s}"));
            assert_eq!(f, decode_serde(s), "{s}");
        }
    }

    #[test]
    fn fast_path_gives_up_where_serde_must_decide() {
        for s in [
            r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ud800\u0041"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a	b"}}]}"#, // raw tab
            r#"{"usage":{"completion_tokens":1.0}}"#,
            r#"{"usage":{"completion_tokens":-1}}"#,
            r#"{"usage":{"completion_tokens":12345678901234567890}}"#,
            r#"{"usage":{"completion_tokens":01}}"#,
            r#"{"x":01}"#,
            r#"{"x":1.}"#,
            r#"{"x":.5}"#,
            r#"{"x":tru}"#,
            r#"{"x":[1,]}"#,
            r#"{"x":1,}"#,
            r#"{"x":"\q"}"#,
            r#"{"x":"\u12G4"}"#,
            r#"{"\u0069d":"x"}"#,
            r#"{"error":{"message":"m"}}"#,
            r#"{"choices":[null]}"#,
            r#"{"choices":{}}"#,
            r#"{"id":1}"#,
            r#"{"id":"x"} x"#,
            r#"{"id":"x""#,
            r#"{"choices":[{"delta":{"tool_calls":"x"}}]}"#,
        ] {
            assert!(fast(s).is_none(), "fast path accepted {s}");
        }
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(40), "]".repeat(40));
        assert!(fast(&deep).is_none());
    }

    struct Rng(u64);
    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n.max(1) as u64) as usize
        }
    }

    /// Differential test: mutate real payloads at random; whenever the fast path accepts the
    /// result, the serde path must give exactly the same answer.
    #[test]
    fn fast_path_never_disagrees_with_serde_on_mutations() {
        const PIECES: &[&str] = &[
            "\"",
            "\\",
            "\\u",
            "\\ud83d",
            "\\ude00",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "\t",
            "\n",
            "0",
            "1",
            "-",
            ".",
            "e",
            "E",
            "+",
            "null",
            "true",
            "false",
            "\"\"",
            "é",
            "我",
            "\u{1}",
            "\"content\":",
            "\"text\":",
            "\"usage\":",
            "\"completion_tokens\":",
            "\"choices\":",
            "\"delta\":",
            "\"tool_calls\":",
            "\"reasoning\":",
            "\"finish_reason\":",
            "\"id\":",
            "\"token\":",
            "\"special\":",
            "\"details\":",
            "\"generated_tokens\":",
            "\"object\":",
            "\"error\":",
            "\"prompt_tokens_details\":",
            "\"cached_tokens\":",
        ];
        let payloads: Vec<String> = fixture_payloads()
            .into_iter()
            .filter(|p| p.trim_start().starts_with('{'))
            .collect();
        let mut rng = Rng(0xA5A5_5A5A_1234_8765);
        let (mut accepted, mut total) = (0usize, 0usize);
        for _ in 0..40_000 {
            let mut s = payloads[rng.below(payloads.len())].clone();
            for _ in 0..1 + rng.below(3) {
                let mut i = rng.below(s.len() + 1);
                while !s.is_char_boundary(i) {
                    i -= 1;
                }
                match rng.below(3) {
                    0 => s.insert_str(i, PIECES[rng.below(PIECES.len())]),
                    1 => {
                        let mut j = (i + 1 + rng.below(4)).min(s.len());
                        while !s.is_char_boundary(j) {
                            j += 1;
                        }
                        s.replace_range(i..j, "");
                    }
                    _ => {
                        let mut j = (i + 1 + rng.below(4)).min(s.len());
                        while !s.is_char_boundary(j) {
                            j += 1;
                        }
                        s.replace_range(i..j, PIECES[rng.below(PIECES.len())]);
                    }
                }
            }
            let t = s.trim_ascii();
            if !t.starts_with('{') {
                continue;
            }
            total += 1;
            if let Some(d) = fast(t) {
                accepted += 1;
                assert_eq!(d, decode_serde(t), "{t}");
            }
        }
        eprintln!("mutants: {accepted} of {total} accepted by the fast path");
        // the test is meaningful only if many mutants are still accepted
        assert!(accepted > total / 10, "{accepted} of {total}");
    }
}
