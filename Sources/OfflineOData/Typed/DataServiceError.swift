public import ODataCore

/// A failure of the typed API (``DataService``), whatever caused it: the backend, the offline
/// store, a value the generated types cannot read, a query the service's version cannot
/// express. The original error is kept in ``underlying``.
public struct DataServiceError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: String, Sendable, Hashable {
        /// The entity does not exist (404), or is not in the offline store.
        case notFound
        /// The entity changed since it was read: its ETag no longer matches (412).
        case preconditionFailed
        /// A function or action import sent to the offline store: operations run on the
        /// backend only.
        case onlineOnly
        /// The query cannot be written for the service's version.
        case invalidQuery
        /// A value in an answer does not fit the generated type (or a missing property).
        case invalidValue
        /// The entity type has no single entity set; name one.
        case missingEntitySet
        /// The backend refused the request (any other 4xx or 5xx).
        case backend
        /// The offline store refused the request or failed.
        case offlineStore
        /// The connection to the backend failed.
        case transport
        /// The task was cancelled.
        case cancelled
        /// The answer was not what the request asks for.
        case unexpectedResponse
    }

    /// What kind of failure.
    public var code: Code
    /// What happened, naming the request.
    public var message: String
    /// The HTTP status, when one is known.
    public var httpStatus: Int?
    /// The error that caused this one.
    public var underlying: (any Error)?

    /// Creates a value from its parts.
    public init(_ code: Code, _ message: String, httpStatus: Int? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.underlying = underlying
    }

    /// The backend's error (code, message, details), when the backend refused the request.
    public var backendError: ODataError? { underlying as? ODataError }

    public var description: String {
        "\(code.rawValue)\(httpStatus.map { " (\($0))" } ?? ""): \(message)"
    }

    /// `error` as a data service error, for the request `what` (`GET Customers`).
    static func wrap(_ error: any Error, _ what: String) -> DataServiceError {
        switch error {
        case let error as DataServiceError: return error
        case is CancellationError: return DataServiceError(.cancelled, "\(what): cancelled", underlying: error)
        case let error as ODataError:
            let status = error.httpStatus
            let code: Code = status == 404 ? .notFound : status == 412 ? .preconditionFailed : .backend
            return DataServiceError(code, "\(what): \(error.message)", httpStatus: status, underlying: error)
        case let error as OfflineODataError:
            let code: Code
            switch error.code {
            case .transport, .unauthorized: code = .transport
            case .cancelled: code = .cancelled
            case .notSupportedOffline: code = .onlineOnly
            case .backend:
                code = error.httpStatus == 404 ? .notFound : error.httpStatus == 412 ? .preconditionFailed : .backend
            default:
                code = error.httpStatus == 404 ? .notFound : error.httpStatus == 412 ? .preconditionFailed : .offlineStore
            }
            return DataServiceError(code, "\(what): \(error.message)", httpStatus: error.httpStatus, underlying: error)
        case let error as TypedValueError:
            return DataServiceError(.invalidValue, "\(what): \(error)", underlying: error)
        case let error as QueryError:
            return DataServiceError(.invalidQuery, "\(what): \(error.message)", underlying: error)
        default:
            return DataServiceError(.unexpectedResponse, "\(what): \(error)", underlying: error)
        }
    }
}
