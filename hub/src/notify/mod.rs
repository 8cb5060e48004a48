//! `fleetbus notify`: fleet events sent to webhooks (Slack, Teams, generic JSON).
//!
//! Where to start: [`targets`] reads the targets file (filters, format, the file
//! holding each webhook URL); [`message`] turns a drift event into a
//! [`Notification`] and renders it per format; [`dedupe`] folds a storm into the
//! first message and one summary with a count; [`deliver`] posts with retries
//! (backoff, `Retry-After`) and counts what it had to give up (dead letters).

pub mod dedupe;
pub mod deliver;
pub mod message;
pub mod targets;

pub use dedupe::Coalescer;
pub use deliver::{Delivered, Delivery, NotifyMetrics, RetryPolicy};
pub use message::{Format, Notification, Severity};
pub use targets::{load_targets, Target, TargetError, WebhookUrl};
