{ bench_loader — seed 004's loader in Free Pascal: deserialise records
  (text lines of a tile database) into objects with string fields, alone
  and while background threads allocate and free too, as a game engine
  loading map tiles while other data loads. Reports the loader's time only:
  wall time, and the CPU time of the loader's thread (on a machine with
  fewer cores than threads the wall time also measures the CPU share the
  loader got; its CPU time shows what the allocations cost it). }
program bench_loader;

{$mode objfpc}{$H+}

uses
  {$ifdef MM_SHOAL} ShoalMM, {$endif}
  {$ifdef MM_CMEM} cmem, {$endif}
  {$ifdef unix} cthreads, UnixType, Linux, {$else} Windows, {$endif} SysUtils, Classes, Contnrs;

{$i benchutil.inc}

type
  TTile = class
    Id: LongInt;
    Tileset: string;
    Name: string;
    Terrain: string;
    Flags: TStringList;
    Passable: Boolean;
    destructor Destroy; override;
  end;

destructor TTile.Destroy;
begin
  Flags.Free;
  inherited Destroy;
end;

var
  Database: TStringList;     { the serialised records, one per line }
  Stop: LongInt = 0;
  BackgroundRounds: array[0..63] of Int64;

procedure MakeDatabase(Records: LongInt);
var
  i: LongInt;
begin
  Database := TStringList.Create;
  Database.Capacity := Records;
  for i := 0 to Records - 1 do
    Database.Add(Format('%d;tileset_%d;tile %d of the map;%s;water,blocked,animated,layer%d;%d',
      [i, i mod 200, i, Copy('grassrocksandwatersnowlava', 1 + i mod 20, 6), i mod 4, i mod 2]));
end;

{ The deserialiser: split each line and build a TTile with its strings. }
function Load: TObjectList;
var
  i: LongInt;
  Fields: TStringList;
  Tile: TTile;
begin
  Result := TObjectList.Create(True);
  Fields := TStringList.Create;
  Fields.Delimiter := ';';
  Fields.StrictDelimiter := True;
  try
    for i := 0 to Database.Count - 1 do
    begin
      Fields.DelimitedText := Database[i];
      Tile := TTile.Create;
      Tile.Id := StrToInt(Fields[0]);
      Tile.Tileset := Fields[1];
      Tile.Name := Fields[2];
      Tile.Terrain := Fields[3];
      Tile.Flags := TStringList.Create;
      Tile.Flags.CommaText := Fields[4];
      Tile.Passable := Fields[5] = '1';
      Result.Add(Tile);
    end;
  finally
    Fields.Free;
  end;
end;

{ Other data loading meanwhile: strings and small objects made and freed. }
function Background(Arg: Pointer): PtrInt;
var
  Items: TObjectList;
  Lines: TStringList;
  i: LongInt;
  Rounds: Int64;
begin
  Rounds := 0;
  while InterlockedCompareExchange(Stop, 0, 0) = 0 do
  begin
    Items := TObjectList.Create(True);
    Lines := TStringList.Create;
    for i := 1 to 200 do
    begin
      Items.Add(TStringList.Create);
      Lines.Add('background line ' + IntToStr(i));
    end;
    Lines.Free;
    Items.Free;
    Inc(Rounds);
  end;
  BackgroundRounds[PtrUInt(Arg)] := Rounds;
  Result := 0;
end;

{ CPU time of the calling thread, microseconds. }
function ThreadCpuMicroseconds: Int64;
{$ifdef unix}
var
  Time: timespec;
begin
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, @Time);
  Result := Int64(Time.tv_sec) * 1000000 + Time.tv_nsec div 1000;
end;
{$else}
var
  Creation, Exit, Kernel, User: TFileTime;
begin
  GetThreadTimes(GetCurrentThread, Creation, Exit, Kernel, User);
  Result := (Int64(Kernel) + Int64(User)) div 10; { 100 ns units }
end;
{$endif}

procedure Measure(BackgroundThreads: Integer);
var
  Threads: array of TThreadID;
  i: Integer;
  Start, Elapsed, CpuStart, Cpu: Int64;
  Tiles: TObjectList;
  Name: string;
begin
  Stop := 0;
  SetLength(Threads, BackgroundThreads);
  for i := 0 to BackgroundThreads - 1 do
    Threads[i] := BeginThread(@Background, Pointer(PtrInt(i)));
  Start := NowMicroseconds;
  CpuStart := ThreadCpuMicroseconds;
  Tiles := Load;
  Cpu := ThreadCpuMicroseconds - CpuStart;
  Elapsed := NowMicroseconds - Start;
  InterlockedExchange(Stop, 1);
  for i := 0 to BackgroundThreads - 1 do
  begin
    WaitForThreadTerminate(Threads[i], 0);
    CloseThread(Threads[i]);
  end;
  if Tiles.Count <> Database.Count then
    Halt(1);
  Tiles.Free;
  if BackgroundThreads = 0 then
    Name := 'loader alone'
  else if BackgroundThreads = 1 then
    Name := 'loader + 1 background thread'
  else
    Name := Format('loader + %d background threads', [BackgroundThreads]);
  Report('loader', Name, Elapsed);
  Report('loader', Name + ', its CPU time', Cpu);
end;

begin
  MakeDatabase(Scaled(200000));
  Measure(0);
  Measure(1);
  Measure(3);
  Database.Free;
end.
