import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import ODataCore

/// Answers a request that the HTTP parser refused (a request line or headers over the limit,
/// characters HTTP does not allow) with an OData error body, then closes the connection.
/// Without it Hummingbird answers an empty `400`, which tells a client nothing.
///
/// It answers only between requests: when the refused bytes follow a request whose response is
/// still to be written, the error goes on to Hummingbird, which closes the connection after it.
final class ParserErrorAnswer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let headerLimit: Int
    /// How many header fields a request may have (Hummingbird's default, named here so that the
    /// answer can say it).
    static let headerFieldLimit = 1000
    /// Requests whose head was read and whose response has not ended.
    private var open = 0
    private var answered = false

    init(headerLimit: Int) {
        self.headerLimit = headerLimit
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) { open += 1 }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { open = max(0, open - 1) }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parserError = error as? HTTPParserError, open == 0, !answered else {
            context.fireErrorCaught(error)
            return
        }
        answered = true
        let (status, error) = Self.answer(to: parserError, headerLimit: headerLimit)
        let body = error.v4JSON()
        var head = HTTPResponse(status: .init(code: status))
        head.headerFields[.contentType] = "application/json;odata.metadata=minimal"
        head.headerFields[.contentLength] = String(body.count)
        head.headerFields[.connection] = "close"
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(ByteBuffer(bytes: body))), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            bound.value.close(promise: nil)
        }
    }

    /// The status and OData error for what the parser refused.
    static func answer(to error: HTTPParserError, headerLimit: Int) -> (Int, ODataError) {
        switch error {
        case .headerOverflow:
            // The parser reports too many bytes and too many fields alike: both limits are named.
            return (431, ODataError(
                code: "RequestHeaderFieldsTooLarge",
                message: "The request line and headers exceed a limit of this server: at most \(headerLimit) bytes "
                    + "in at most \(headerFieldLimit) header fields. Send a long query as a GET inside a $batch.",
                httpStatus: 431))
        case .invalidConstant, .invalidVersion, .invalidURL:
            return (400, ODataError(
                code: "BadHTTPRequest",
                message: "The request line is not 'METHOD URL HTTP/1.1' (\(error)): spaces and control characters "
                    + "in a URL must be percent-encoded.", httpStatus: 400))
        default:
            return (400, ODataError(
                code: "BadHTTPRequest", message: "The request is not valid HTTP/1.1 (\(error)).", httpStatus: 400))
        }
    }
}
