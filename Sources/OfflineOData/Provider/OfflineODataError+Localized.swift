public import Foundation

/// `localizedDescription` (what an alert shows) is the error's message, not Foundation's
/// "The operation could not be completed".
extension OfflineODataError: LocalizedError {
    /// The message, with what is wrong and where.
    public var errorDescription: String? { message }
}

extension TransportError: LocalizedError {
    /// The message, with the request it belongs to.
    public var errorDescription: String? { description }
}
