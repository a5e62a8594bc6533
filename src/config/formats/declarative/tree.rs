//! The sampler tree a declarative file describes, generic in what a `rate_limiting`
//! node holds (the rule file's model when read, its sampler when built), and its
//! one-line description.

use std::fmt;

use opentelemetry_sdk::trace::Sampler;

#[cfg(feature = "composable")]
use super::composite;

/// The plugin key of this crate's sampler in a declarative configuration file.
pub(crate) const PLUGIN_KEY: &str = "rate_limiting";

/// A sampler tree, generic in what a `rate_limiting` node holds: the rule file's model
/// when read, its sampler when built.
#[derive(Clone, Debug)]
pub(crate) enum Node<R> {
    /// `always_on`, `always_off`, `trace_id_ratio_based`: the SDK's own.
    Sdk(Sampler),
    /// `rate_limiting`.
    RateLimiting(R),
    /// `parent_based`.
    ParentBased(Box<Branches<R>>),
    /// `composite/development` (feature `composable`).
    #[cfg(feature = "composable")]
    Composite(Box<composite::Composite>),
}

/// The branches of a `parent_based` node.
#[derive(Clone, Debug)]
pub(crate) struct Branches<R> {
    pub(crate) root: Node<R>,
    pub(crate) remote_parent_sampled: Node<R>,
    pub(crate) remote_parent_not_sampled: Node<R>,
    pub(crate) local_parent_sampled: Node<R>,
    pub(crate) local_parent_not_sampled: Node<R>,
}

impl<R> Branches<R> {
    /// The branches, `root` first.
    fn nodes(&self) -> [&Node<R>; 5] {
        [
            &self.root,
            &self.remote_parent_sampled,
            &self.remote_parent_not_sampled,
            &self.local_parent_sampled,
            &self.local_parent_not_sampled,
        ]
    }

    /// The specification's defaults around `root`.
    pub(crate) fn with_root(root: Node<R>) -> Self {
        Self {
            root,
            remote_parent_sampled: Node::Sdk(Sampler::AlwaysOn),
            remote_parent_not_sampled: Node::Sdk(Sampler::AlwaysOff),
            local_parent_sampled: Node::Sdk(Sampler::AlwaysOn),
            local_parent_not_sampled: Node::Sdk(Sampler::AlwaysOff),
        }
    }
}

impl<R> Node<R> {
    /// Whether a `rate_limiting` node is anywhere in the tree.
    pub(crate) fn has_rate_limiting(&self) -> bool {
        match self {
            Node::RateLimiting(_) => true,
            Node::ParentBased(b) => b.nodes().iter().any(|n| n.has_rate_limiting()),
            _ => false,
        }
    }

    /// The limits of the composite samplers' rate limiters (`root` before the other
    /// `parent_based` branches, each composite's in document order).
    pub(crate) fn composite_limits(&self) -> Vec<crate::limit::Limit> {
        match self {
            #[cfg(feature = "composable")]
            Node::Composite(c) => c.limits.clone(),
            Node::ParentBased(b) => b
                .nodes()
                .iter()
                .flat_map(|n| n.composite_limits())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The same tree with each `rate_limiting` node built by `build`, in document order.
    pub(crate) fn try_map<S, E>(
        self,
        build: &mut impl FnMut(R) -> Result<S, E>,
    ) -> Result<Node<S>, E> {
        Ok(match self {
            Node::Sdk(s) => Node::Sdk(s),
            Node::RateLimiting(r) => Node::RateLimiting(build(r)?),
            #[cfg(feature = "composable")]
            Node::Composite(c) => Node::Composite(c),
            Node::ParentBased(b) => Node::ParentBased(Box::new(Branches {
                root: b.root.try_map(build)?,
                remote_parent_sampled: b.remote_parent_sampled.try_map(build)?,
                remote_parent_not_sampled: b.remote_parent_not_sampled.try_map(build)?,
                local_parent_sampled: b.local_parent_sampled.try_map(build)?,
                local_parent_not_sampled: b.local_parent_not_sampled.try_map(build)?,
            })),
        })
    }
}

impl<R> fmt::Display for Node<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Sdk(Sampler::AlwaysOn) => f.write_str("always_on"),
            Node::Sdk(Sampler::AlwaysOff) => f.write_str("always_off"),
            Node::Sdk(Sampler::TraceIdRatioBased(r)) => write!(f, "trace_id_ratio_based({r})"),
            Node::Sdk(other) => write!(f, "{other:?}"),
            Node::RateLimiting(_) => f.write_str(PLUGIN_KEY),
            #[cfg(feature = "composable")]
            Node::Composite(c) => f.write_str(&c.description),
            Node::ParentBased(b) => write!(
                f,
                "parent_based(root: {}, remote_parent_sampled: {}, remote_parent_not_sampled: {}, local_parent_sampled: {}, local_parent_not_sampled: {})",
                b.root,
                b.remote_parent_sampled,
                b.remote_parent_not_sampled,
                b.local_parent_sampled,
                b.local_parent_not_sampled
            ),
        }
    }
}
