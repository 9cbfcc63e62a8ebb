public import ODataCore
public import ODataStore

extension DataService {
    /// A live typed query: yields the entities `query` reads at once, then again after each
    /// committed local write, download, upload or undo that touches the entity sets the query
    /// depends on, and only when the entities differ from the last ones yielded.
    ///
    /// Over the offline provider (and the router's offline provider) every change of the
    /// store counts; over the online provider, the writes made through this service. The
    /// sequence ends when the consuming task is cancelled and throws when a read fails.
    ///
    /// ```swift
    /// for try await orders in service.observe(SalesService.salesOrders.query.filter { $0.status == .new }) {
    ///     show(orders)
    /// }
    /// ```
    public func observe<E>(_ query: TypedQuery<E>) -> AsyncThrowingStream<[E], any Error> {
        let url: String
        do {
            url = try self.url(of: query)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
        return observe(url: url) { result throws(DataServiceError) -> [E] in
            try Self.entities(result, url: url)
        }
    }

    /// A live read of a URL (see ``observe(_:)``), yielding the untyped result.
    public func observe(url: String) -> AsyncThrowingStream<QueryResult, any Error> {
        observe(url: url) { $0 }
    }

    func observe<T: Sendable & Equatable>(
        url: String, transform: @escaping @Sendable (QueryResult) throws(DataServiceError) -> T
    ) -> AsyncThrowingStream<T, any Error> {
        let handler = self.handler
        let writes = self.writes
        let subscribe: @Sendable () async throws -> AsyncStream<Void>
        if let provider = handler as? OfflineODataProvider {
            subscribe = { await provider.changeSignals(readSets: try await provider.readSets(of: url)) }
        } else if let router = handler as? ODataRouter {
            subscribe = {
                let offline = router.offline
                let sets = try? await offline.readSets(of: url)
                let store = await offline.changeSignals(readSets: sets ?? nil)
                let own = await writes.subscribe()
                return Self.merge(store, own)
            }
        } else {
            subscribe = { await writes.subscribe() }
        }
        return LiveQuery.run(subscribe: subscribe) {
            let result: QueryResult
            do {
                result = try await handler.read(url)
            } catch {
                throw DataServiceError.wrap(error, "GET \(url)")
            }
            return try transform(result)
        }
    }

    static func entities<E: ODataEntity>(_ result: QueryResult, url: String) throws(DataServiceError) -> [E] {
        do {
            switch result {
            case .collection(let collection):
                return try collection.entities.map { (entity) throws(TypedValueError) in try E(entity: entity) }
            case .entity(let entity):
                return try entity.map { (entity) throws(TypedValueError) in [try E(entity: entity)] } ?? []
            default: throw DataServiceError(.unexpectedResponse, "GET \(url) did not answer with entities")
            }
        } catch let error as DataServiceError {
            throw error
        } catch {
            throw DataServiceError.wrap(error, "GET \(url)")
        }
    }

    /// One signal stream from two.
    static func merge(_ first: AsyncStream<Void>, _ second: AsyncStream<Void>) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let a = Task {
            for await _ in first { continuation.yield(()) }
        }
        let b = Task {
            for await _ in second { continuation.yield(()) }
        }
        continuation.onTermination = { _ in
            a.cancel()
            b.cancel()
        }
        return stream
    }
}

/// The loop behind every live query: subscribe, read, yield; on each signal read again and
/// yield when the result changed. Cancelling the consumer cancels the loop, which ends its
/// subscription.
enum LiveQuery {
    static func run<T: Sendable & Equatable>(
        subscribe: @escaping @Sendable () async throws -> AsyncStream<Void>,
        read: @escaping @Sendable () async throws -> T
    ) -> AsyncThrowingStream<T, any Error> {
        let (stream, continuation) = AsyncThrowingStream<T, any Error>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let task = Task {
            do {
                // Subscribe before the first read, so that a change during it is not missed.
                let signals = try await subscribe()
                var last = try await read()
                continuation.yield(last)
                for await _ in signals {
                    try Task.checkCancellation()
                    let next = try await read()
                    if next != last {
                        last = next
                        continuation.yield(next)
                    }
                }
                continuation.finish()
            } catch is CancellationError {
                continuation.finish()
            } catch let error as DataServiceError where error.code == .cancelled {
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}
