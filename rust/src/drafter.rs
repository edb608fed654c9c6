//! Drafters: one per method, all producing the same [`FlatTree`] (one decoding step, steps
//! 2-4, 8 and 9; the other methods are the peers RACER is measured against).
//!
//! | method        | retrieval part                  | logits part                          |
//! |---------------|---------------------------------|--------------------------------------|
//! | `racer`       | Aho-Corasick automaton          | copy-logit table (fills the rest)    |
//! | `retrieval`   | Aho-Corasick automaton          | none                                 |
//! | `logits`      | none                            | copy-logit table (Token Recycling)   |
//! | `logits-last` | none                            | root from `last_topk`, then table    |
//! | `pld`         | prompt lookup: one chain        | none                                 |
//! | `ar`          | none (root only: plain decoding)| none                                 |
//!
//! The verification loop talks to a drafter through three calls per step:
//! `observe(token_ids, topk_ids)` (tokens the target was fed and the top-k ids of its
//! logits there: copy-logit rows), `commit(token_ids)` (tokens that became output: the
//! automaton and the PLD history), and `draft(root, last_topk)`.
//!
//! A drafter checks every argument at this boundary, once, and trusts what it built itself
//! (its automaton's paths, its own capacity) inside.
//!
//! ```
//! use racer_ref::drafter::{Drafter, DrafterConfig, Method};
//!
//! // Prompt lookup (PLD): copy what followed the last match of the context's suffix.
//! let mut config = DrafterConfig::new(Method::Pld, 50);
//! config.capacity = 4;
//! let mut pld = Drafter::new(config)?;
//! pld.commit(&[1, 2, 3, 4, 5, 6, 1])?;
//! // Context 1 2 3 4 5 6 1 | root 2: "1 2" occurred at the start, so 3 4 5 follow.
//! assert_eq!(pld.draft(2, None)?.tokens, vec![2, 3, 4, 5]);
//! # Ok::<(), racer_ref::error::Error>(())
//! ```

use std::str::FromStr;

use crate::automaton::{Automaton, Paths};
use crate::copy_logit::{check_observe, check_token_id, check_token_ids, CopyLogitTable};
use crate::draft_tree::{check_capacity, FlatTree, TreeBuilder};
use crate::error::{Error, Result};
use crate::expected_tree::Estimator;
use crate::{
    Id, TokenId, DEFAULT_BREADTH, DEFAULT_CAPACITY, DEFAULT_MAX_NODES, DEFAULT_MIN_BORDER_DEPTH,
    DEFAULT_NGRAM,
};

/// How a drafter fills its capacity (methods `racer`, `retrieval`, `logits`,
/// `logits-last`; `pld` and `ar` draft the same either way).
///
/// ```
/// use racer_ref::drafter::TreeKind;
/// assert_eq!("paper".parse::<TreeKind>()?, TreeKind::Paper);
/// assert_eq!(TreeKind::default().name(), "paper");
/// assert!("best".parse::<TreeKind>().is_err());
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TreeKind {
    /// Beyond the paper: the nodes with the most expected accepted tokens
    /// ([`crate::expected_tree`]).
    Expected,
    /// The paper's merge (the default): retrieval first, then the logits tree by Eq. 3.
    #[default]
    Paper,
}

impl TreeKind {
    /// `"expected"` or `"paper"`.
    pub fn name(self) -> &'static str {
        match self {
            TreeKind::Expected => "expected",
            TreeKind::Paper => "paper",
        }
    }
}

impl FromStr for TreeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<TreeKind> {
        match s {
            "expected" => Ok(TreeKind::Expected),
            "paper" => Ok(TreeKind::Paper),
            _ => Err(Error::value(
                "tree",
                format!("unknown tree {s:?}; expected one of \"expected\", \"paper\""),
            )),
        }
    }
}

/// Prompt lookup: the longest n-gram tried first (then n - 1, ..., 1).
pub const PLD_MAX_NGRAM: usize = 3;
/// Prompt lookup: at most this many tokens are copied after the match.
pub const PLD_NUM_TOKENS: usize = 10;

/// A drafting method (see the module table).
///
/// ```
/// use racer_ref::drafter::Method;
/// let m: Method = "logits-last".parse()?;
/// assert_eq!(m, Method::LogitsLast);
/// assert_eq!(m.name(), "logits-last");
/// assert!(m.uses_table() && !m.uses_automaton());
/// assert!("greedy".parse::<Method>().is_err());
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// RACER: the retrieval tree from the automaton, then the logits tree fills the rest.
    Racer,
    /// Ablation: the retrieval tree alone.
    Retrieval,
    /// Ablation: the logits tree alone, from the copy-logit table (as Token Recycling).
    Logits,
    /// Ablation: the logits tree with the root's children from the last logits
    /// (`last_topk`) instead of the root's table row (LogitSpec-style last-logit).
    LogitsLast,
    /// Prompt lookup decoding: one chain copied after the last n-gram match.
    Pld,
    /// No drafts: the root alone, i.e. plain autoregressive decoding.
    Ar,
}

impl Method {
    /// Every method, in documentation order.
    pub const ALL: [Method; 6] = [
        Method::Racer,
        Method::Retrieval,
        Method::Logits,
        Method::LogitsLast,
        Method::Pld,
        Method::Ar,
    ];

    /// The method's public name (`"racer"`, `"logits-last"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Method::Racer => "racer",
            Method::Retrieval => "retrieval",
            Method::Logits => "logits",
            Method::LogitsLast => "logits-last",
            Method::Pld => "pld",
            Method::Ar => "ar",
        }
    }

    /// Whether the method drafts from the Aho-Corasick automaton.
    pub fn uses_automaton(self) -> bool {
        matches!(self, Method::Racer | Method::Retrieval)
    }

    /// Whether the method drafts from the copy-logit table.
    pub fn uses_table(self) -> bool {
        matches!(self, Method::Racer | Method::Logits | Method::LogitsLast)
    }
}

impl FromStr for Method {
    type Err = Error;
    /// The method named `s` (its [`Method::name`]); an unknown name is an
    /// `Error::Value` naming `method` that lists the six names.
    fn from_str(s: &str) -> Result<Method> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::value(
                    "method",
                    format!(
                    "unknown method {s:?}; expected one of \"racer\", \"retrieval\", \"logits\", \
                     \"logits-last\", \"pld\", \"ar\""
                ),
                )
            })
    }
}

/// The prompt-lookup chain (PLD). `context` is the committed tokens followed by the root.
/// For n = `max_ngram` down to 1: take the last n tokens of the context, find their most
/// recent *earlier* occurrence (start < len - n), and return up to `num_tokens` tokens that
/// follow it (never empty: the match ends before the last token). No match: empty.
///
/// ```
/// use racer_ref::drafter::prompt_lookup;
/// // The last 3 tokens "2 3 4" occurred before, followed by 5 6 9 ...
/// let context = [1, 2, 3, 4, 5, 6, 9, 2, 3, 4];
/// assert_eq!(prompt_lookup(&context, 3, 2), &[5, 6]);
/// assert!(prompt_lookup(&[1, 2, 3], 3, 10).is_empty());
/// ```
pub fn prompt_lookup(context: &[TokenId], max_ngram: usize, num_tokens: usize) -> &[TokenId] {
    let len = context.len();
    for n in (1..=max_ngram).rev() {
        if len <= n {
            continue;
        }
        let suffix = &context[len - n..];
        // Most recent first: start from the latest possible earlier occurrence.
        for start in (0..len - n).rev() {
            if &context[start..start + n] == suffix {
                let end = (start + n + num_tokens).min(len);
                return &context[start + n..end];
            }
        }
    }
    &[]
}

/// The parameters of a [`Drafter`] (validated by [`Drafter::new`]). Sizes are `i64` so
/// that a caller can pass what it received (a negative number included) and get a clear
/// error rather than a wrapped-around `usize`.
///
/// ```
/// use racer_ref::drafter::{DrafterConfig, Method};
/// let c = DrafterConfig { capacity: 32, ..DrafterConfig::new(Method::Racer, 49_152) };
/// assert_eq!((c.capacity, c.breadth, c.ngram), (32, 8, 10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrafterConfig {
    /// The drafting method.
    pub method: Method,
    /// Token ids are in `[0, vocab_size)`.
    pub vocab_size: i64,
    /// Maximum draft-tree nodes, root included (paper 64).
    pub capacity: i64,
    /// `k`: copy-logit ids per row and the root's breadth (paper 8).
    pub breadth: i64,
    /// Automaton n-gram length (paper 10).
    pub ngram: i64,
    /// Automaton node budget (paper 10,000).
    pub max_nodes: i64,
    /// Shallowest border depth the automaton retrieves from (2: a border holds at least one context token before the root).
    pub min_border_depth: i64,
    /// How the capacity is filled (default [`TreeKind::Paper`], which measured as good or
    /// better; see docs/explanation/expected-tree.md).
    pub tree: TreeKind,
}

impl DrafterConfig {
    /// The paper's defaults for `method` and `vocab_size`: C = 64, k = 8, n = 10,
    /// max_nodes = 10,000, min_border_depth = 2.
    pub fn new(method: Method, vocab_size: i64) -> Self {
        DrafterConfig {
            method,
            vocab_size,
            capacity: DEFAULT_CAPACITY as i64,
            breadth: DEFAULT_BREADTH as i64,
            ngram: DEFAULT_NGRAM as i64,
            max_nodes: DEFAULT_MAX_NODES as i64,
            min_border_depth: DEFAULT_MIN_BORDER_DEPTH as i64,
            tree: TreeKind::Paper,
        }
    }
}

/// One drafter: whichever of automaton, copy-logit table and PLD history its method needs,
/// plus a reusable [`TreeBuilder`].
///
/// ```
/// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
/// let mut d = Drafter::new(DrafterConfig { capacity: 8, ..DrafterConfig::new(Method::Racer, 20) })?;
/// d.commit(&[1, 2, 3, 1])?;                 // the context: the automaton learns it
/// d.observe(&[2], &[3, 9, 1, 1, 1, 1, 1, 1], [1, 8])?; // top-8 ids after token 2
/// let tree = d.draft(2, None)?;             // "2 3 1" from retrieval, 9 from the table
/// assert_eq!(&tree.tokens[..3], &[2, 3, 9]);
/// assert!(tree.len() <= 8);
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug)]
pub struct Drafter {
    config: DrafterConfig,
    // The validated sizes.
    vocab_size: usize,
    capacity: usize,
    breadth: usize,
    automaton: Option<Automaton>,
    table: Option<CopyLogitTable>,
    /// Committed tokens (PLD only; other methods keep just the count).
    history: Vec<TokenId>,
    num_committed: usize,
    builder: TreeBuilder,
    // Scratch, reused every step: the automaton's paths, `last_topk` as token ids, the
    // PLD chain.
    paths: Paths,
    chain: Vec<TokenId>,
    // Beyond the paper: the acceptance estimates, attached by `TreeKind::Expected` and
    // `capacity="auto"` only (`attach_estimator`); `None` on the paper's step.
    estimator: Option<Box<Estimator>>,
}

impl Drafter {
    /// Build a drafter. Errors: `vocab_size < 1`, capacity outside `[1, MAX_CAPACITY]`,
    /// `breadth` outside `[1, vocab_size]` or a too large table, and the automaton's own
    /// parameter errors (`ngram`, `max_nodes`, `min_border_depth`) for methods that use it.
    /// Every parameter is checked, whether or not the method uses it.
    ///
    /// ```
    /// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
    /// let d = Drafter::new(DrafterConfig::new(Method::Retrieval, 100))?;
    /// assert!(d.automaton().is_some() && d.table().is_none());
    /// let bad = DrafterConfig { breadth: 0, ..DrafterConfig::new(Method::Ar, 100) };
    /// assert_eq!(
    ///     Drafter::new(bad).unwrap_err().to_string(),
    ///     "breadth: must be in [1, vocab_size] = [1, 100], got 0"
    /// );
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn new(config: DrafterConfig) -> Result<Self> {
        // Every parameter is checked for every method, in the twin's order (table,
        // capacity, automaton), so that a setting is never silently ignored; the table
        // and the automaton are built only if the method uses them.
        let (vocab_size, breadth) =
            CopyLogitTable::check_params(config.vocab_size, config.breadth, "breadth")?;
        let capacity = check_capacity(config.capacity)?;
        let table = if config.method.uses_table() {
            Some(CopyLogitTable::new(config.vocab_size, config.breadth)?)
        } else {
            None
        };
        let automaton = Automaton::new(config.max_nodes, config.ngram, config.min_border_depth)?;
        let automaton = config.method.uses_automaton().then_some(automaton);
        let estimator = (config.tree == TreeKind::Expected).then(Box::default);
        Ok(Drafter {
            config,
            vocab_size,
            capacity,
            breadth,
            automaton,
            table,
            history: Vec::new(),
            num_committed: 0,
            builder: TreeBuilder::new(),
            paths: Paths::default(),
            chain: Vec::new(),
            estimator,
        })
    }

    /// The configuration this drafter was built with.
    pub fn config(&self) -> &DrafterConfig {
        &self.config
    }

    /// The copy-logit table (methods `racer`, `logits`, `logits-last`).
    pub fn table(&self) -> Option<&CopyLogitTable> {
        self.table.as_ref()
    }

    /// The automaton (methods `racer`, `retrieval`).
    pub fn automaton(&self) -> Option<&Automaton> {
        self.automaton.as_ref()
    }

    /// Number of tokens committed since the last reset.
    pub fn num_committed(&self) -> usize {
        self.num_committed
    }

    /// The acceptance estimates and the last draft's annotation, if attached (beyond the
    /// paper; see [`Drafter::attach_estimator`]).
    pub fn estimator(&self) -> Option<&Estimator> {
        self.estimator.as_deref()
    }

    /// Attach the acceptance estimates (beyond the paper): from now on every draft is
    /// annotated with path probabilities and every `observe` about the last draft is
    /// learned from. [`TreeKind::Expected`] attaches them in [`Drafter::new`]; the
    /// capacity controller of `capacity="auto"` calls this. Attaching twice keeps what was
    /// learned. `pld` and `ar` draft without estimates either way.
    pub fn attach_estimator(&mut self) {
        if self.estimator.is_none() {
            self.estimator = Some(Box::default());
        }
    }

    /// Copy-logit update (step 8): `table[token_ids[i]] = topk_ids[i, :k]`.
    /// `topk_ids` is row-major with shape `topk_shape = (n, k' >= k)`.
    ///
    /// Which tokens to pass is the caller's choice: every prompt position after prefill;
    /// after a verify pass every tree node (the paper's default, rejected ones included)
    /// or only the accepted ones. Validated for every method, stored only by the methods
    /// with a table. Errors (nothing changes): shape, or an id outside `[0, vocab_size)`.
    ///
    /// ```
    /// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
    /// let mut d = Drafter::new(DrafterConfig::new(Method::Logits, 100))?;
    /// d.observe(&[3], &[4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 9])?; // a top-9, k = 8 kept
    /// assert_eq!(d.table().unwrap().row(3), &[4, 5, 6, 7, 8, 9, 10, 11]);
    /// assert!(d.observe(&[3], &[4, 5], [1, 2]).is_err()); // narrower than k
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn observe(
        &mut self,
        token_ids: &[TokenId],
        topk_ids: &[TokenId],
        topk_shape: [usize; 2],
    ) -> Result<()> {
        // Same checks for every method, before anything changes.
        self.check_observe(token_ids, topk_ids, topk_shape)?;
        self.observe_trusted(token_ids, topk_ids, topk_shape);
        Ok(())
    }

    /// The checks of [`Drafter::observe`], for ids as the caller holds them (the PyO3
    /// layer checks the `i64`s of a numpy array here, then converts them).
    pub(crate) fn check_observe<T: Id>(
        &self,
        token_ids: &[T],
        topk_ids: &[T],
        topk_shape: [usize; 2],
    ) -> Result<()> {
        check_observe(
            token_ids,
            topk_ids,
            topk_shape,
            self.vocab_size,
            self.breadth,
        )
    }

    /// [`Drafter::observe`] for checked arguments.
    pub(crate) fn observe_trusted(
        &mut self,
        token_ids: &[TokenId],
        topk_ids: &[TokenId],
        topk_shape: [usize; 2],
    ) {
        // Beyond the paper: rows about the last draft become labelled samples (before the
        // table takes the new rows).
        if let Some(e) = &mut self.estimator {
            e.learn(token_ids, topk_ids, topk_shape, self.table.as_ref());
        }
        if let Some(t) = &mut self.table {
            t.observe_trusted(token_ids, topk_ids, topk_shape);
        }
    }

    /// Commit tokens that became output (step 9): the automaton is extended and the
    /// PLD history grows. Errors (nothing changes): an id outside `[0, vocab_size)`.
    ///
    /// ```
    /// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
    /// let mut d = Drafter::new(DrafterConfig::new(Method::Racer, 100))?;
    /// d.commit(&[1, 2, 3])?;
    /// assert_eq!((d.num_committed(), d.automaton().unwrap().len()), (3, 6));
    /// assert!(d.commit(&[100]).is_err()); // outside [0, vocab_size): nothing committed
    /// assert_eq!(d.num_committed(), 3);
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn commit(&mut self, token_ids: &[TokenId]) -> Result<()> {
        self.check_commit(token_ids)?;
        self.commit_trusted(token_ids);
        Ok(())
    }

    /// The check of [`Drafter::commit`], for ids as the caller holds them.
    pub(crate) fn check_commit<T: Id>(&self, token_ids: &[T]) -> Result<()> {
        check_token_ids("token_ids", token_ids, self.vocab_size)
    }

    /// [`Drafter::commit`] for ids the caller checked (all in `[0, vocab_size)`).
    pub(crate) fn commit_trusted(&mut self, token_ids: &[TokenId]) {
        if let Some(a) = &mut self.automaton {
            a.extend(token_ids);
        }
        if self.config.method == Method::Pld {
            self.history.extend_from_slice(token_ids);
        }
        self.num_committed += token_ids.len();
    }

    /// Build this step's draft tree for `root` (steps 2-4).
    ///
    /// `last_topk`: the top-k' ids (k' >= breadth) of the logits that produced the root;
    /// required by `logits-last`, validated but unused by the other methods.
    /// Errors: root or an id outside `[0, vocab_size)`, `last_topk` too short or missing
    /// for `logits-last`.
    ///
    /// ```
    /// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
    /// let mut config = DrafterConfig::new(Method::LogitsLast, 100);
    /// config.breadth = 2;
    /// let mut d = Drafter::new(config)?;
    /// d.observe(&[7], &[8, 9], [1, 2])?;
    /// // The root's children come from last_topk (7, 6), then row 7 of the table (8, 9).
    /// let tree = d.draft(5, Some(&[7, 6, 1]))?;
    /// assert_eq!(tree.tokens, vec![5, 7, 6, 8, 9]);
    /// assert!(d.draft(5, None).is_err()); // logits-last needs last_topk
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn draft(&mut self, root: TokenId, last_topk: Option<&[TokenId]>) -> Result<&FlatTree> {
        self.draft_at(root, last_topk, None)
    }

    /// [`Drafter::draft`] with this step's `capacity` (`None`: the drafter's). With
    /// [`TreeKind::Expected`] the retrieval candidates still come from a retrieval at the
    /// drafter's capacity, so the tree at `capacity` is exactly the first `capacity` nodes
    /// of the tree at the drafter's capacity. Errors: as `draft`, and a capacity outside
    /// `[1, MAX_CAPACITY]`.
    ///
    /// ```
    /// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
    /// use racer_ref::drafter::TreeKind;
    /// let config = DrafterConfig { capacity: 8, tree: TreeKind::Expected, ..DrafterConfig::new(Method::Logits, 20) };
    /// let mut d = Drafter::new(config)?;
    /// d.observe(&[2], &[3, 9, 1, 1, 1, 1, 1, 1], [1, 8])?;
    /// assert_eq!(d.draft_at(2, None, Some(2))?.tokens, vec![2, 3]);
    /// let e = d.estimator().unwrap().last_annotation().unwrap().expected_tokens();
    /// assert_eq!(e, 1.5); // the prior of rank 0: 1 / 2
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn draft_at(
        &mut self,
        root: TokenId,
        last_topk: Option<&[TokenId]>,
        capacity: Option<i64>,
    ) -> Result<&FlatTree> {
        let (root, capacity) = self.check_draft(root, last_topk, capacity)?;
        self.draft_trusted(root, last_topk, capacity)
    }

    /// The checks of [`Drafter::draft_at`] (all but the one `draft_trusted` makes), for
    /// ids as the caller holds them; returns the root and this step's capacity.
    pub(crate) fn check_draft<T: Id>(
        &self,
        root: T,
        last_topk: Option<&[T]>,
        capacity: Option<i64>,
    ) -> Result<(TokenId, usize)> {
        let vocab = self.vocab_size;
        let root = check_token_id("root", root, vocab)?;
        let step_capacity = match capacity {
            None => self.capacity,
            Some(c) => check_capacity(c)?,
        };
        let k = self.breadth;
        if let Some(rt) = last_topk {
            if rt.len() < k {
                return Err(Error::value(
                    "last_topk",
                    format!("expected at least breadth = {k} ids, got {}", rt.len()),
                ));
            }
            check_token_ids("last_topk", rt, vocab)?;
        }
        Ok((root, step_capacity))
    }

    /// [`Drafter::draft_at`] for arguments checked by [`Drafter::check_draft`]. Errors:
    /// `last_topk` missing for `logits-last` (the last draft is forgotten first, as in
    /// the twin).
    pub(crate) fn draft_trusted(
        &mut self,
        root: TokenId,
        last_topk: Option<&[TokenId]>,
        capacity: usize,
    ) -> Result<&FlatTree> {
        let no_paths = std::iter::empty::<&[TokenId]>();
        if let Some(e) = &mut self.estimator {
            e.forget_last();
        }
        if self.config.method == Method::LogitsLast && last_topk.is_none() {
            return Err(Error::value(
                "last_topk",
                "required by method \"logits-last\" (got None)",
            ));
        }
        if self.config.method != Method::Pld && self.config.method != Method::Ar {
            return Ok(self.draft_tree(root, capacity, last_topk));
        }
        // pld and ar (the other methods returned above).
        let tree = match self.config.method {
            Method::Pld => {
                // The context is the committed tokens followed by the root; the one
                // retrieval path is the root, then the copied chain.
                self.history.push(root);
                let copied = prompt_lookup(&self.history, PLD_MAX_NGRAM, PLD_NUM_TOKENS);
                self.chain.clear();
                self.chain.push(root);
                self.chain.extend_from_slice(copied);
                self.history.pop();
                let path = std::iter::once(&self.chain[..]);
                self.builder.build_trusted(root, capacity, path, None, None)
            }
            _ => self
                .builder
                .build_trusted(root, capacity, no_paths, None, None),
        };
        Ok(tree)
    }

    /// The tree methods (racer, retrieval, logits, logits-last): the retrieval paths, then
    /// the paper's merge (steps 2-4), or the estimator's tree when one is attached.
    /// Arguments already checked.
    fn draft_tree(
        &mut self,
        root: TokenId,
        capacity: usize,
        last_topk: Option<&[TokenId]>,
    ) -> &FlatTree {
        let k = self.breadth;
        let expected = self.config.tree == TreeKind::Expected;
        if let Some(automaton) = self.automaton.as_mut() {
            let budget = if expected { self.capacity } else { capacity };
            // The paths' frequencies are for the estimates alone: the paper's step (no
            // estimator attached) does not write them.
            let counted = self.estimator.is_some();
            automaton.retrieve_trusted(root, budget, &mut self.paths, counted);
        } else {
            self.paths.tokens.clear();
            self.paths.starts.clear();
            self.paths.freqs.clear();
        }
        let root_row = match (self.config.method, last_topk) {
            // At least k ids (checked): the first k replace the root's row.
            (Method::LogitsLast, Some(rt)) => Some(&rt[..k]),
            _ => None,
        };
        if let Some(e) = self.estimator.as_mut() {
            // Beyond the paper: the estimated tree, or the paper's annotated.
            return e.draft(
                &mut self.builder,
                root,
                capacity,
                &self.paths,
                self.table.as_ref(),
                root_row,
                expected,
            );
        }
        // The paper's merge: retrieval first, then the logits tree fills the rest.
        self.builder.build_trusted(
            root,
            capacity,
            self.paths.iter(),
            self.table.as_ref(),
            root_row,
        )
    }

    /// Forget everything: automaton, copy-logit table, history.
    ///
    /// ```
    /// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
    /// let mut d = Drafter::new(DrafterConfig::new(Method::Racer, 100))?;
    /// d.commit(&[1, 2, 3])?;
    /// d.reset();
    /// assert_eq!((d.num_committed(), d.automaton().unwrap().len()), (0, 0));
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn reset(&mut self) {
        if let Some(a) = &mut self.automaton {
            a.reset();
        }
        if let Some(t) = &mut self.table {
            t.reset();
        }
        self.history.clear();
        self.num_committed = 0;
        if let Some(e) = &mut self.estimator {
            e.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drafter(method: Method, vocab: i64, capacity: i64, k: i64) -> Drafter {
        let mut c = DrafterConfig::new(method, vocab);
        c.capacity = capacity;
        c.breadth = k;
        Drafter::new(c).unwrap()
    }

    #[test]
    fn method_names_round_trip() {
        for m in Method::ALL {
            assert_eq!(m.name().parse::<Method>().unwrap(), m);
        }
        assert!("RACER".parse::<Method>().is_err());
    }

    #[test]
    fn prompt_lookup_rules() {
        // context: 1 2 3 4 | 9 2 3 | root 4: last 3-gram "2 3 4" occurs at 1 -> copy from 4.
        let ctx = [1, 2, 3, 4, 5, 6, 9, 2, 3, 4];
        assert_eq!(prompt_lookup(&ctx, 3, 10), &[5, 6, 9, 2, 3, 4]);
        assert_eq!(prompt_lookup(&ctx, 3, 2), &[5, 6]);
        // most recent match wins: "7" occurs twice before the end.
        let ctx = [7, 1, 7, 2, 7];
        assert_eq!(prompt_lookup(&ctx, 3, 10), &[2, 7]);
        // no match at all
        assert!(prompt_lookup(&[1, 2, 3], 3, 10).is_empty());
        assert!(prompt_lookup(&[5], 3, 10).is_empty());
        // falls back from n = 3 to n = 1
        let ctx = [8, 5, 1, 2, 5];
        assert_eq!(prompt_lookup(&ctx, 3, 10), &[1, 2, 5]);
    }

    #[test]
    fn pld_drafter_chain_capped_by_capacity() {
        let mut d = drafter(Method::Pld, 20, 4, 2);
        d.commit(&[1, 2, 3, 4, 5, 6, 1]).unwrap();
        let f = d.draft(2, None).unwrap();
        // context 1 2 3 4 5 6 1 2: "1 2" matches at 0 -> 3 4 5 ..., capped to 3 drafts.
        assert_eq!(f.tokens, vec![2, 3, 4, 5]);
        assert_eq!(f.parents, vec![-1, 0, 1, 2]);
        assert_eq!(f.sources, vec![0, 1, 1, 1]);
    }

    #[test]
    fn ar_is_root_only_and_validation() {
        let mut d = drafter(Method::Ar, 10, 64, 8);
        assert_eq!(d.draft(3, None).unwrap().tokens, vec![3]);
        assert!(d.draft(10, None).is_err());
        assert!(d.draft(u32::MAX, None).is_err());
        assert!(d.observe(&[1], &[1, 2, 3], [1, 3]).is_err()); // k' < k
        assert!(d.observe(&[1], &[1; 8], [1, 8]).is_ok());
        assert!(d.commit(&[1, 10]).is_err());
        assert_eq!(d.num_committed(), 0);
    }

    #[test]
    fn racer_merges_retrieval_and_logits() {
        let mut d = drafter(Method::Racer, 50, 8, 2);
        // The context repeats "5 6 7 8", so the automaton can continue root 6 with 7 8 ...
        d.commit(&[5, 6, 7, 8, 1, 5]).unwrap();
        // Copy-logit row of 6: [7, 9].
        d.observe(&[6], &[7, 9], [1, 2]).unwrap();
        let f = d.draft(6, None).unwrap();
        assert_eq!(f.tokens[0], 6);
        let i7 = f.tokens.iter().position(|&t| t == 7).unwrap();
        assert_eq!(f.parents[i7], 0);
        assert_eq!(f.sources[i7], crate::draft_tree::SOURCE_BOTH);
        assert!(f.tokens.contains(&9));
        assert!(f.len() <= 8);
    }

    #[test]
    fn logits_last_needs_last_topk() {
        let mut d = drafter(Method::LogitsLast, 10, 8, 2);
        assert!(d.draft(1, None).is_err());
        assert!(d.draft(1, Some(&[2])).is_err());
        d.observe(&[2], &[3, 4], [1, 2]).unwrap();
        let f = d.draft(1, Some(&[2, 5, 9])).unwrap();
        assert_eq!(f.tokens, vec![1, 2, 5, 3, 4]);
    }
}
