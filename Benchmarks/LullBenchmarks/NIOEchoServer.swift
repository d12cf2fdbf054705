// SwiftNIO's idiomatic echo server, the peer of the echo comparison (EchoPeersBenchmark):
// a ServerBootstrap on a MultiThreadedEventLoopGroup with one event loop per core, and the
// handler of NIO's own echo example, which writes back each read and flushes once the
// read burst is over (channelReadComplete). TCP_NODELAY is ServerBootstrap's default for
// accepted channels, as LoopbackSocket sets it for Lull's and Dispatch's servers.

import NIOCore
import NIOPosix

/// Writes back what it reads; flushes at the end of each read burst.
final class NIOEchoHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.write(data, promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

/// The NIO echo server on 127.0.0.1, on a port the kernel picks.
final class NIOEchoServer: Sendable {
    let port: UInt16
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel

    init(backlog: Int32) throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: backlog)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOEchoHandler())
                }
            }
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
        do {
            channel = try bootstrap.bind(host: "127.0.0.1", port: 0).wait()
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        port = UInt16(channel.localAddress?.port ?? 0)
    }
}
