import Foundation
import Logging
import NIOCore
public import PostgresNIO

/// One connection made by hand before the pool starts, so that a PostgreSQL the gateway cannot
/// use is named at once with the server's own words (a pool retries with back-off and reports
/// only that its circuit breaker tripped, a minute later).
public enum PostgresProbe {
    /// Connects to the server `configuration` names and asks `SELECT 1`, within `seconds`.
    /// Throws a ``GatewayError`` naming host, port, database and user, what went wrong (the
    /// server's message where it sent one) and what to do about it.
    public static func check(_ configuration: PostgresClient.Configuration, seconds: Double) async throws {
        let place = DeadlineClient.describe(configuration)
        var connection = PostgresConnection.Configuration(
            host: configuration.host ?? "127.0.0.1", port: configuration.port ?? 5432,
            username: configuration.username, password: configuration.password, database: configuration.database,
            tls: .disable)
        if let socket = configuration.unixSocketPath {
            connection = PostgresConnection.Configuration(
                unixSocketPath: socket, username: configuration.username, password: configuration.password,
                database: configuration.database)
        }
        connection.options.connectTimeout = .milliseconds(Int64(seconds * 1000))
        let settings = connection
        var logger = Logger(label: "oodata.gateway.postgres-probe")
        logger.logLevel = .critical
        let quiet = logger
        do {
            try await DeadlineClient.within(seconds, server: place) {
                let opened = try await PostgresConnection.connect(configuration: settings, id: 1, logger: quiet)
                do {
                    _ = try await opened.query("SELECT 1", logger: quiet)
                } catch {
                    try? await opened.close()
                    throw error
                }
                try? await opened.close()
            }
        } catch let error as PostgresDeadlineExceeded {
            throw GatewayError(
                status: 503, code: "PostgreSQL",
                "PostgreSQL (\(place)) did not answer within \(error.seconds) s: is the server running there, "
                    + "and does a firewall let the connection through?")
        } catch {
            throw GatewayError(status: 503, code: "PostgreSQL", "PostgreSQL (\(place)): \(explain(error))")
        }
    }

    /// What went wrong, in the server's words where it sent some, with the step that helps.
    static func explain(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let info = error.serverInfo, let message = info[.message] {
            let state = info[.sqlState] ?? ""
            var text = "the server says: \(message)" + (state.isEmpty ? "" : " (SQLSTATE \(state))")
            switch state {
            case "28P01", "28000":
                text +=
                    ". Create the role with a password, or connect through the local socket "
                    + "(docs/gateway.md, \"PostgreSQL on Debian\")"
            case "3D000":
                text += ". Create the database (createdb), or name one that exists"
            case "57P03":
                text += ". The server is starting or shutting down; try again"
            default: break
            }
            return text
        }
        switch error.code {
        case .connectionError, .serverClosedConnection:
            let cause = error.underlying.map { "\($0)" } ?? "the connection failed"
            if cause.contains("Connection refused") {
                return "connection refused: no PostgreSQL listens there (is it running, and on this port?)"
            }
            if cause.contains("No such file or directory") || cause.contains("errno: 2") {
                return "no socket file there: no PostgreSQL listens in that folder on that port (the socket is "
                    + ".s.PGSQL.PORT; give the port as :PORT or ?port=)"
            }
            return "cannot connect: \(cause)"
        case .authMechanismRequiresPassword:
            return "the server asks for a password and the URL gives none (postgres://USER:PASSWORD@HOST/DB)"
        case .unsupportedAuthMechanism:
            return "the server asks for an authentication method the gateway does not speak"
        case .sslUnsupported:
            return "the server does not offer TLS"
        default:
            return "\(error.code)" + (error.underlying.map { ": \($0)" } ?? "")
        }
    }
}
