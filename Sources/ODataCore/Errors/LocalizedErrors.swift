public import Foundation

// `localizedDescription` (what an alert shows) is each error's own description — its message
// with the place it names — not Foundation's "The operation could not be completed".

extension MetadataError: LocalizedError {
    /// The description: message and place in the document.
    public var errorDescription: String? { description }
}

extension ODataError: LocalizedError {
    /// The description: code and message of the service's error.
    public var errorDescription: String? { description }
}

extension SyntaxError: LocalizedError {
    /// The description: message and place in the URL.
    public var errorDescription: String? { description }
}

extension BindingError: LocalizedError {
    /// The description: message and place in the URL.
    public var errorDescription: String? { description }
}

extension PayloadError: LocalizedError {
    /// The description: message and place in the payload.
    public var errorDescription: String? { description }
}
