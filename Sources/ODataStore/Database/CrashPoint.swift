import Foundation

/// Points of a migration, a download, an upload or the reference server's batch where a test
/// can have the process killed (`kill -9` of itself), so that crash tests reach each window
/// exactly: set `OODATA_CRASH_POINT` to a point's name in the environment of a process to test.
/// Nothing happens without it.
package enum CrashPoint {
    static let armed = ProcessInfo.processInfo.environment["OODATA_CRASH_POINT"]

    /// Kills this process when `OODATA_CRASH_POINT` is `name`.
    package static func reach(_ name: String) {
        guard let armed, armed == name else { return }
        kill(getpid(), SIGKILL)
    }
}
