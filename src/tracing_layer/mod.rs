//! Feature `tracing`: [`SkipDropped`], a layer around tracing-opentelemetry's that pays
//! only for the traces the sampler keeps, and [`DroppedContextExt`], the propagation
//! drop-in that goes with it. Follows tracing-subscriber 0.3 and tracing-opentelemetry
//! 0.34.
//!
//! * `layer.rs`: the layer and what it forwards of each callback;
//! * `decide.rs`: how it learns a span's fate (the context an enter attaches, the
//!   span's mark, or the inner layer made to start the span);
//! * `mark.rs`: what it knows of a span's trace (pending root, kept, dropped, skipped);
//! * `entered.rs`: the spans each thread entered, with their trace's fate and the
//!   dropped trace's context attached inside a skipped span, and the skipped spans it
//!   made in a dropped trace's scope, known by id until they close or it leaves
//!   (`entered/pending.rs`);
//! * `context.rs`: [`DroppedContextExt::otel_context`], a span's context to inject.

mod context;
mod decide;
mod entered;
mod layer;
mod mark;

pub use context::DroppedContextExt;
pub use layer::SkipDropped;
