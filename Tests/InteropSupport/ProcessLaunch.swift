public import Foundation

/// Starts child processes one at a time. swift-corelibs-foundation's `Process.run()` is not
/// safe to call from two threads at once (it crashed in a `memcpy` inside `run()` when a
/// code-generation test and a CLI test launched together), so every test launches through here.
public enum ProcessLaunch {
    // The lock serializes only the launch; the processes then run side by side.
    private static let lock = NSLock()

    /// Launches `process`.
    public static func run(_ process: Process) throws {
        lock.lock()
        defer { lock.unlock() }
        try process.run()
    }
}
