//! A RACER decoding loop in Rust alone: each step drafts a token tree from an Aho-Corasick
//! automaton (the retrieval tree) and a copy-logit table (the logits tree), a target model
//! verifies the whole tree, and the accepted tokens are committed. The output must equal
//! plain greedy decoding, token for token.
//!
//! The "target model" is a toy: a word-level trigram model (with backoff to bigrams and
//! single words) counted on a short cumulative rhyme. Its top-k at a position are the k
//! most frequent next words; its greedy choice is the first of them. A real loop would run
//! an LLM over the flattened tree in one forward pass with `FlatTree::attention_mask`;
//! here each node is scored on its own path, which gives the same answers.
//!
//!     cargo run --example drafting_loop

use std::collections::HashMap;

use racer_ref::automaton::{Automaton, Paths};
use racer_ref::copy_logit::CopyLogitTable;
use racer_ref::draft_tree::{FlatTree, TreeBuilder, SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL};
use racer_ref::error::Result;
use racer_ref::TokenId;

const RHYME: &str = "This is the house that Jack built. \
This is the malt that lay in the house that Jack built. \
This is the rat that ate the malt that lay in the house that Jack built. \
This is the cat that killed the rat that ate the malt that lay in the house that Jack built. \
This is the dog that worried the cat that killed the rat that ate the malt that lay in the \
house that Jack built. \
This is the cow with the crumpled horn that tossed the dog that worried the cat that killed \
the rat that ate the malt that lay in the house that Jack built.";

/// Draft-tree capacity C (nodes per verify pass, root included), copy-logit breadth k,
/// automaton window n and node budget.
const CAPACITY: usize = 16;
const K: usize = 4;
const NGRAM: i64 = 6;
const MAX_NODES: i64 = 2_000;
/// Tokens to generate after the prompt.
const NEW_TOKENS: usize = 120;

/// Words to ids and back.
struct Vocab {
    ids: HashMap<String, TokenId>,
    words: Vec<String>,
}

impl Vocab {
    fn new(text: &str) -> Vocab {
        let mut v = Vocab {
            ids: HashMap::new(),
            words: Vec::new(),
        };
        for w in text.split_whitespace() {
            if !v.ids.contains_key(w) {
                v.ids.insert(w.to_string(), v.words.len() as TokenId);
                v.words.push(w.to_string());
            }
        }
        v
    }

    fn encode(&self, text: &str) -> Vec<TokenId> {
        text.split_whitespace().map(|w| self.ids[w]).collect()
    }

    fn decode(&self, tokens: &[TokenId]) -> String {
        let words: Vec<&str> = tokens
            .iter()
            .map(|&t| self.words[t as usize].as_str())
            .collect();
        words.join(" ")
    }
}

/// The toy target model: next-word counts after two words, after one word, and overall.
struct TrigramModel {
    vocab_size: usize,
    after_two: HashMap<(TokenId, TokenId), HashMap<TokenId, u32>>,
    after_one: HashMap<TokenId, HashMap<TokenId, u32>>,
    overall: HashMap<TokenId, u32>,
}

impl TrigramModel {
    fn train(tokens: &[TokenId], vocab_size: usize) -> TrigramModel {
        let mut m = TrigramModel {
            vocab_size,
            after_two: HashMap::new(),
            after_one: HashMap::new(),
            overall: HashMap::new(),
        };
        for (i, &t) in tokens.iter().enumerate() {
            *m.overall.entry(t).or_default() += 1;
            if i >= 1 {
                *m.after_one
                    .entry(tokens[i - 1])
                    .or_default()
                    .entry(t)
                    .or_default() += 1;
            }
            if i >= 2 {
                let key = (tokens[i - 2], tokens[i - 1]);
                *m.after_two.entry(key).or_default().entry(t).or_default() += 1;
            }
        }
        m
    }

    /// The `k` most likely next tokens after `context`, best first (the target's top-k
    /// logits): trigram counts first, then bigram, then overall counts; ties by token id.
    fn topk(&self, context: &[TokenId], k: usize) -> Vec<TokenId> {
        let ranked = |counts: Option<&HashMap<TokenId, u32>>| {
            let mut v: Vec<(u32, TokenId)> = counts
                .into_iter()
                .flatten()
                .map(|(&t, &c)| (c, t))
                .collect();
            v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            v.into_iter().map(|(_, t)| t)
        };
        let n = context.len();
        let two = (n >= 2)
            .then(|| self.after_two.get(&(context[n - 2], context[n - 1])))
            .flatten();
        let one = (n >= 1)
            .then(|| self.after_one.get(&context[n - 1]))
            .flatten();
        let mut out = Vec::with_capacity(k);
        for t in ranked(two)
            .chain(ranked(one))
            .chain(ranked(Some(&self.overall)))
        {
            if out.len() == k {
                break;
            }
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// The greedy choice after `context` (the argmax of the logits).
    fn argmax(&self, context: &[TokenId]) -> TokenId {
        self.topk(context, 1)[0]
    }
}

/// Plain greedy decoding: one token per model call. The reference output.
fn greedy(model: &TrigramModel, prompt: &[TokenId], new_tokens: usize) -> Vec<TokenId> {
    let mut out = prompt.to_vec();
    for _ in 0..new_tokens {
        out.push(model.argmax(&out));
    }
    out
}

/// Step 5-6 for the toy model: the target's top-k at every tree node (the context is the
/// committed tokens, then the node's path from the root), and the longest path it accepts.
/// Returns `(topk per node, accepted node indices after the root)`.
fn verify(
    model: &TrigramModel,
    committed: &[TokenId],
    tree: &FlatTree,
) -> (Vec<Vec<TokenId>>, Vec<usize>) {
    let n = tree.len();
    // The context of node i: committed tokens + the tokens from the root down to i (row i
    // of the attention mask holds exactly i and its ancestors).
    let topk: Vec<Vec<TokenId>> = (0..n)
        .map(|i| {
            let mut context = committed.to_vec();
            context.extend(
                (0..n)
                    .filter(|&j| tree.attention_mask[i * n + j])
                    .map(|j| tree.tokens[j] as TokenId),
            );
            model.topk(&context, K)
        })
        .collect();
    // Greedy acceptance: from the root, follow the child whose token is the argmax.
    let mut accepted = Vec::new();
    let mut u = 0;
    while let Some(c) =
        (u + 1..n).find(|&c| tree.parents[c] == u as i64 && tree.tokens[c] == topk[u][0])
    {
        accepted.push(c);
        u = c;
    }
    (topk, accepted)
}

fn main() -> Result<()> {
    let vocab = Vocab::new(RHYME);
    let corpus = vocab.encode(RHYME);
    let model = TrigramModel::train(&corpus, vocab.words.len());
    let prompt = vocab.encode("This is the cow with the");
    let reference = greedy(&model, &prompt, NEW_TOKENS);

    // The drafting state: the automaton over the committed tokens, the copy-logit table of
    // the target's past top-k, and a reusable tree builder.
    let mut automaton = Automaton::new(MAX_NODES, NGRAM, 2)?;
    let mut table = CopyLogitTable::new(model.vocab_size as i64, K as i64)?;
    let mut builder = TreeBuilder::new();
    let mut paths = Paths::default();

    // Prefill: the target sees the prompt; the table learns its top-k at every position,
    // the automaton the prompt's n-grams; the first root is the target's greedy choice.
    let mut out = prompt.clone();
    for i in 0..prompt.len() {
        let ids = model.topk(&prompt[..=i], K);
        table.observe(&[prompt[i]], &ids, [1, K])?;
    }
    automaton.extend(&prompt);
    let mut root = model.argmax(&prompt);

    let (mut steps, mut drafted_by) = (0usize, [0usize; 4]);
    while out.len() < prompt.len() + NEW_TOKENS {
        steps += 1;
        // Steps 2-4: retrieval tree, logits tree filling the rest, flattened.
        automaton.retrieve_into(root, CAPACITY, &mut paths)?;
        let retrieval: Vec<&[TokenId]> = paths.iter().collect();
        let tree = builder.build(root, CAPACITY, &retrieval, Some(&table), None)?;
        // Steps 5-6: verify the whole tree, accept the longest matching path.
        let (topk, accepted) = verify(&model, &out, tree);
        for &c in &accepted {
            drafted_by[tree.sources[c] as usize] += 1;
        }
        // Step 7: commit the root and the accepted drafts (never past NEW_TOKENS).
        let mut block = vec![root];
        block.extend(accepted.iter().map(|&c| tree.tokens[c]));
        block.truncate(prompt.len() + NEW_TOKENS - out.len());
        // Step 8: every verified node's top-k goes into the copy-logit table.
        let topk_ids: Vec<TokenId> = topk.iter().flatten().copied().collect();
        table.observe(&tree.tokens, &topk_ids, [tree.len(), K])?;
        // Step 9: the automaton learns the committed tokens.
        automaton.extend(&block);
        out.extend_from_slice(&block);
        // The last accepted node's argmax is the next root (the "bonus" token).
        root = topk[accepted.last().copied().unwrap_or(0)][0];
    }

    let new = out.len() - prompt.len();
    println!("prompt : {}", vocab.decode(&prompt));
    println!(
        "output : {} ...",
        vocab.decode(&out[prompt.len()..prompt.len() + 30])
    );
    println!(
        "{new} new tokens in {steps} steps: MAT {:.2} tokens per step (plain decoding: 1.00)",
        new as f64 / steps as f64
    );
    println!(
        "accepted drafts by source: retrieval {}, logits {}, both {}",
        drafted_by[SOURCE_RETRIEVAL as usize],
        drafted_by[SOURCE_LOGITS as usize],
        drafted_by[SOURCE_BOTH as usize]
    );
    let identical = out == reference;
    println!("identical to plain greedy decoding: {identical}");
    assert!(identical, "speculative output differs from greedy decoding");
    Ok(())
}
