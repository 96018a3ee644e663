//! One tool call: JSON on stdin, output capture with limits, timeout and
//! cancellation of the whole process group, and the `ToolResult`.
